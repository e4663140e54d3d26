"""Publishing a run to the Hugging Face Hub.

:mod:`node.hub.auth` (the account behind a token, where it is kept), :mod:`node.hub.errors` (each way talking to the
Hub fails, in plain words), :mod:`node.hub.upload` (diff, upload, one commit), :mod:`node.hub.model_card` and
:mod:`node.hub.auto_upload` (uploads every N rounds, beside training).

May import: the seam at the top of ``node``, :mod:`node.learning.checkpoint` (what is uploaded) and
:mod:`node.swarm.identity` (the peer name in the repo name). Never :mod:`node.sapo`, :mod:`node.game`, the runner or
the CLI. The app imports auth, errors and upload, which import no torch until an upload runs.
"""
