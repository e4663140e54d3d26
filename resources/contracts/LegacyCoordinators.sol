// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import "./CoordinatorCore.sol";

/// @title The older public SwarmCoordinator interfaces, for the client's tests
/// @notice Public swarms ran several interface versions; the node detects which one it meets and speaks it. These
/// contracts give the tests a chain with each older interface (0.5.1 is SwarmCoordinator deployed with 3 stages).
/// Never deployed by the app.

/// Views the 0.4.x interfaces have and 0.5.0 removed.
abstract contract VoteViews04 is CoordinatorCore {
    function getPeerVoteCount(uint256 roundNumber, string calldata peerId) external view returns (uint256) {
        return _roundVoteCounts[roundNumber][peerId];
    }

    function uniqueVotedPeers() external view returns (uint256) {
        return _votedPeers.length;
    }

    function voterLeaderboard(uint256 start, uint256 end)
        external view returns (string[] memory peerIds, uint256[] memory voteCounts)
    {
        return _leaderboard(_voters, _voterVoteCounts, start, end);
    }

    function winnerLeaderboard(uint256 start, uint256 end)
        external view returns (string[] memory peerIds, uint256[] memory wins)
    {
        return _leaderboard(_votedPeers, _totalWins, start, end);
    }

    /// Positions [start, end) of ``peers`` ranked by ``counts``, highest first (ties keep first-seen order).
    function _leaderboard(string[] storage peers, mapping(string => uint256) storage counts, uint256 start, uint256 end)
        private view returns (string[] memory top, uint256[] memory values)
    {
        require(start <= end, "Start index must not be after the end index");
        uint256 n = peers.length;
        string[] memory ranked = new string[](n);
        uint256[] memory scores = new uint256[](n);
        for (uint256 i = 0; i < n; i++) {
            (string memory peer, uint256 score) = (peers[i], counts[peers[i]]);
            uint256 j = i;
            while (j > 0 && scores[j - 1] < score) {
                ranked[j] = ranked[j - 1];
                scores[j] = scores[j - 1];
                j--;
            }
            ranked[j] = peer;
            scores[j] = score;
        }
        if (end > n) end = n;
        if (start > end) start = end;
        top = new string[](end - start);
        values = new uint256[](end - start);
        for (uint256 i = start; i < end; i++) {
            top[i - start] = ranked[i];
            values[i - start] = scores[i];
        }
    }
}

/// The 0.4.2 interface: 3 stages; one reward per wallet, round and stage; hasSubmittedRoundStageReward by address;
/// a past round's reward only while the chain's stage is at least the reward's.
contract SwarmCoordinatorV042 is VoteViews04 {
    constructor() CoordinatorCore(3) {}

    function stageCount() public pure override returns (uint256) {
        return 3;
    }

    /// 0.4.2 checks a reward's stage against the chain's current stage whatever the reward's round (0.4.3 fixed
    /// it): a past round's later stage is refused with InvalidStageNumber until the chain is at that stage again.
    function submitReward(uint256 roundNumber, uint256 stageNumber, int256 reward, string calldata peerId) external {
        if (roundNumber < this.currentRound() && stageNumber < stageCount() && stageNumber > this.currentStage()) {
            revert InvalidStageNumber();
        }
        _submitReward(roundNumber, stageNumber, reward, peerId, _walletKey(msg.sender));
    }

    function hasSubmittedRoundStageReward(uint256 roundNumber, uint256 stageNumber, address account)
        external view returns (bool)
    {
        return _rewardWasSubmitted(roundNumber, stageNumber, _walletKey(account));
    }
}

/// The 0.4.3 interface: 3 stages; rewards keyed by peer id with the uint256 overload; the 0.4.x vote views.
contract SwarmCoordinatorV043 is VoteViews04, PeerKeyedRewards {
    constructor() CoordinatorCore(3) {}

    function stageCount() public pure override returns (uint256) {
        return 3;
    }
}
