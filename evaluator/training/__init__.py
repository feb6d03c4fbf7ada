"""Fine-tuning of retrieval evaluators (cross-encoder, T5) on labelled pairs.

Importing this package imports torch and transformers.
"""

from evaluator.training.backends import METADATA_FILE
from evaluator.training.checkpoints import CHECKPOINT_DIR
from evaluator.training.data import KINDS, Kind, loss_weights
from evaluator.training.errors import TrainingError
from evaluator.training.trainer import DEFAULT_LEARNING_RATES, TrainResult, train_evaluator

__all__ = [
    "CHECKPOINT_DIR",
    "DEFAULT_LEARNING_RATES",
    "KINDS",
    "METADATA_FILE",
    "Kind",
    "TrainResult",
    "TrainingError",
    "loss_weights",
    "train_evaluator",
]
