"""The swarm: everything that crosses the network between peers.

Owns the wire format of shared rollouts (:mod:`node.swarm.records`), what a round needs from the rollout exchange and
an in-memory one (:mod:`node.swarm.exchange`), the exchange over hivemind's DHT (:mod:`node.swarm.dht`), the storage
it lends the swarm (:mod:`node.swarm.storage`), peers' networks (:mod:`node.swarm.peer_addresses`), whether peers can
reach us (:mod:`node.swarm.reachability`) and whom we met (:mod:`node.swarm.known_peers`), the peer identity
(:mod:`node.swarm.identity`), invites (:mod:`node.swarm.invite`) and a private swarm's admission secret
(:mod:`node.swarm.admission`). The round clock is time arithmetic shared with the seam: :mod:`node.clock`.

May import: the seam at the top of ``node`` (config, clock, errors, events, secret_store), :mod:`node.tasks` (a record names
its task, never its answer) and the game's record format (:mod:`node.game.records`, carried by the same DHT). Never
:mod:`node.learning`, :mod:`node.sapo`, :mod:`node.hub` or the runner: the swarm knows nothing of models; only the
runner wires it to the learner (an import-linter contract in pyproject.toml holds this).
"""
