"""Chat models: local transformers models and the operator's model server.

Importing the package asks OpenMP (torch's CPU thread pool, libgomp) to wait passively: its
threads sleep at the end of a parallel region instead of spinning. On a machine whose cores are
also busy with other work (a shared 2-core machine, a server answering several runs), spinning
threads wait at every barrier for a sibling the scheduler has put aside, and SmolLM2-135M in
bfloat16 on 2 threads then took 3.4-14.7 s to read a 229-token prompt and 1.7-3.3 s a token
(1.0-1.3 s and 0.16-0.23 s with passive waiting; load average about 7). On a machine at rest
the two are alike (cold ``crag ask`` medians of three, alternated: 8.3 s spinning, 7.7 s
passive, load about 2). The setting is read
once, when torch loads, so it is made here: the CLI, the served graphs and the API import this
package (through the deployment settings) before anything imports torch. A value the user set
(``OMP_WAIT_POLICY=ACTIVE`` on a machine of their own) is kept.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
