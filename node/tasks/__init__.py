"""What a node trains on: verifiable tasks, their names on the wire, the curriculum and the prompts.

:mod:`node.tasks.source` (sampling from reasoning-gym, regeneration from a peer's task ref, verifiable rewards),
:mod:`node.tasks.taskref` (the name of a task instance as it crosses the network), :mod:`node.tasks.curriculum`
(which tasks, at which difficulty) and :mod:`node.tasks.prompts` (the chat a policy answers).

The bottom layer: may import only ``node.errors``; every other subsystem may import it.
"""
