"""RL Swarm node: a headless SAPO participant (GRPO with rollout sharing over hivemind). Never imports Qt."""
