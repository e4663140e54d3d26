"""RL Swarm Desktop: the Qt front end. Everything heavy happens in a node process (package ``node``)."""
