// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import "./CoordinatorCore.sol";

/// @title SwarmCoordinator for self-hosted RL swarms
/// @notice Implements the newest public SwarmCoordinator interface (0.6.0; 0.5.1 has the same ABI): rewards keyed
/// by peer id, so every node of a wallet is rewarded, with both submitReward overloads; hasSubmittedRoundStageReward
/// by peer id; a stage count chosen at deployment (1 for SAPO, as on 0.6.0; 3 for the multi-stage game, as on
/// 0.4.x and 0.5.x). The node's client talks to it exactly as to the public contract of that version.
/// Not upgradeable: whoever deploys it owns it and holds every role.
contract SwarmCoordinator is PeerKeyedRewards {
    constructor(uint256 stages) CoordinatorCore(stages) {}
}
