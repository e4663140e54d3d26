"""Every command line: ``rl-swarm-node`` and the app's ``--demo`` and ``--self-test``.

:mod:`node.cli.main` (the parser; run, hardware, identity, invite), :mod:`node.cli.chain` (wallet and chain),
:mod:`node.cli.hub` (upload, hf login|logout|whoami), :mod:`node.cli.demo` (a local swarm of node processes),
:mod:`node.cli.selftest` (``rl-swarm --self-test``) and :mod:`node.cli.event_output` (the ``--events-*`` options of
the commands that report typed events).

The top layer: may import every subsystem; nothing else in ``node`` imports it (``python -m node`` runs
:func:`node.cli.main.main`).
"""
