"""On-chain swarm coordination: networks, the SwarmCoordinator client, the submission queue, account summaries.

Qt-free API for the app (all calls block with timeouts; run them in worker threads):

- :mod:`node.chain.wallet`: ``new_wallet() -> PendingWallet`` (words, address, quiz positions);
  ``WalletStore(data_dir, name, backend=, passphrase=)`` with ``save_new(pending, answers)``,
  ``import_mnemonic / import_private_key / import_keystore``, ``export_keystore(dest, password)``,
  ``unlock() -> LocalAccount``, ``info() -> WalletInfo | None``; ``node.secret_store.keyring_available()`` says
  whether to ask for a passphrase.
- :mod:`node.chain.networks`: ``PRESETS``, ``resolve(ChainSettings) -> ChainTarget | None``,
  ``rpc_health(url, expected_chain_id) -> RpcHealth``.
- :mod:`node.chain.coordinator`: ``CoordinatorClient(target, account, version=None)`` (detects the interface
  version on first use: ``detect()``, ``version``, ``stage_count()``; reads, ``register_peer``, submissions,
  ``advance_round`` (a whole round) / ``advance_stage``), ``deploy_coordinator(target, account, stages=1)``,
  ``ChainRevert`` (decoded custom errors, Error(string), Panic) and ``MissingFunction``.
- :mod:`node.chain.versions`: the public interface versions (0.4.2, 0.4.3, 0.5.1, 0.6.0) and what differs;
  ``expected(setting)``: the version a ``[chain] coordinator_version`` asks every client to check.
- :mod:`node.chain.reverts`: ``revert_of(exc)``, the one place that tells a contract's revert from a transport
  failure, whichever web3 provider raised it (HTTP, IPC, the in-process tester).
- :mod:`node.chain.account`: ``account_summary(config, address, peer_id) -> AccountSummary`` (with the
  coordinator's version and stage),
  ``recent_transactions(config)``.
- A running node reports ``ChainStatus`` and ``ChainTransaction`` events (:mod:`node.events`); a reward that waits
  for a 0.4.2 coordinator's stage window is reported with status ``waiting_for_stage``.
"""
