"""On-chain swarm coordination: networks, the SwarmCoordinator client, the submission queue, account summaries.

Qt-free API for the app (all calls block with timeouts; run them in worker threads):

- :mod:`node.wallet`: ``new_wallet() -> PendingWallet`` (words, address, quiz positions);
  ``WalletStore(data_dir, name, backend=, passphrase=)`` with ``save_new(pending, answers)``,
  ``import_mnemonic / import_private_key / import_keystore``, ``export_keystore(dest, password)``,
  ``unlock() -> LocalAccount``, ``info() -> WalletInfo | None``; ``node.secret_store.keyring_available()`` says
  whether to ask for a passphrase.
- :mod:`node.chain.networks`: ``PRESETS``, ``resolve(ChainSettings) -> ChainTarget | None``,
  ``rpc_health(url, expected_chain_id) -> RpcHealth``.
- :mod:`node.chain.coordinator`: ``CoordinatorClient(target, account)`` (reads, ``register_peer``, submissions,
  ``advance_round``), ``deploy_coordinator(target, account) -> DeployResult``, ``ChainRevert`` (decoded errors).
- :mod:`node.chain.account`: ``account_summary(config, address, peer_id) -> AccountSummary``,
  ``recent_transactions(config)``.
- A running node reports ``ChainStatus`` and ``ChainTransaction`` events (:mod:`node.events`).
"""
