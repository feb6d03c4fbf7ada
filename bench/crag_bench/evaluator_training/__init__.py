"""Fine-tuning of retrieval evaluators (cross-encoder, T5) on labelled pairs.

Importing this package imports torch and transformers.
"""

from crag_bench.evaluator_training.backends import METADATA_FILE
from crag_bench.evaluator_training.checkpoints import CHECKPOINT_DIR
from crag_bench.evaluator_training.data import KINDS, Kind, loss_weights
from crag_bench.evaluator_training.errors import TrainingError
from crag_bench.evaluator_training.options import DEFAULT_LEARNING_RATES, TrainingOptions
from crag_bench.evaluator_training.trainer import TrainResult, train_evaluator

__all__ = [
    "CHECKPOINT_DIR",
    "DEFAULT_LEARNING_RATES",
    "KINDS",
    "METADATA_FILE",
    "Kind",
    "TrainResult",
    "TrainingError",
    "TrainingOptions",
    "loss_weights",
    "train_evaluator",
]
