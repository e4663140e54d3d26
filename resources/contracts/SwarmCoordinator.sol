// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title SwarmCoordinator for self-hosted RL swarms
/// @notice Implements the public SwarmCoordinator 0.4.2 interface (same function signatures, events and custom
/// errors) that the node's client speaks, so a swarm can run on this contract or on the public one alike.
/// Not upgradeable: whoever deploys it owns it and holds every role.
contract SwarmCoordinator {
    bytes32 public constant OWNER_ROLE = keccak256("OWNER_ROLE");
    bytes32 public constant STAGE_MANAGER_ROLE = keccak256("STAGE_MANAGER_ROLE");
    bytes32 public constant BOOTNODE_MANAGER_ROLE = keccak256("BOOTNODE_MANAGER_ROLE");
    /// SAPO has one stage per round: each stage advance starts a new round.
    uint256 private constant STAGE_COUNT = 1;
    uint256 private constant MAX_PEER_ID_BYTES = 128;
    uint256 private constant MAX_WINNERS = 16;

    uint256 private _currentRound;
    uint256 private _currentStage;
    mapping(bytes32 => mapping(address => bool)) private _roles;

    string[] private _bootnodes;

    mapping(string => address) private _peerToEoa;
    mapping(address => string[]) private _eoaToPeers;

    mapping(uint256 => mapping(uint256 => mapping(address => int256))) private _roundStageRewards;
    mapping(uint256 => mapping(uint256 => mapping(address => bool))) private _rewardSubmitted;
    mapping(string => int256) private _totalRewards;

    mapping(uint256 => mapping(string => string[])) private _votes; // round -> voter peer -> winners
    mapping(uint256 => mapping(string => uint256)) private _roundVoteCounts; // round -> winner -> votes
    mapping(string => uint256) private _totalWins;
    mapping(string => uint256) private _voterVoteCounts;
    mapping(string => bool) private _hasVoted;
    mapping(string => bool) private _wasVotedFor;
    uint256 public uniqueVoters;
    uint256 public uniqueVotedPeers;

    event AllBootnodesCleared(address indexed manager);
    event BootnodeRemoved(address indexed manager, uint256 index);
    event BootnodesAdded(address indexed manager, uint256 count);
    event CumulativeRewardsUpdated(address indexed account, string peerId, int256 totalRewards);
    event PeerRegistered(address indexed eoa, string peerId);
    event RewardSubmitted(address indexed account, uint256 indexed roundNumber, uint256 indexed stageNumber, int256 reward, string peerId);
    event RoleGranted(bytes32 indexed role, address indexed account, address indexed sender);
    event RoleRevoked(bytes32 indexed role, address indexed account, address indexed sender);
    event RoundAdvanced(uint256 indexed newRoundNumber);
    event StageAdvanced(uint256 indexed roundNumber, uint256 newStage);
    event WinnerSubmitted(address indexed account, string peerId, uint256 indexed roundNumber, string[] winners);

    error InvalidBootnodeIndex();
    error InvalidRoundNumber();
    error InvalidStageNumber();
    error InvalidVote();
    error InvalidVoterPeerId();
    error OnlyBootnodeManager();
    error OnlyOwner();
    error OnlyStageManager();
    error PeerIdAlreadyRegistered();
    error RewardAlreadySubmitted();
    error StageOutOfBounds();
    error WinnerAlreadyVoted();

    constructor() {
        _grant(OWNER_ROLE, msg.sender);
        _grant(STAGE_MANAGER_ROLE, msg.sender);
        _grant(BOOTNODE_MANAGER_ROLE, msg.sender);
    }

    // ------------------------------------------------------------------------------------------------ roles
    function hasRole(bytes32 role, address account) public view returns (bool) {
        return _roles[role][account];
    }

    function grantRole(bytes32 role, address account) external {
        if (!_roles[OWNER_ROLE][msg.sender]) revert OnlyOwner();
        _grant(role, account);
    }

    function revokeRole(bytes32 role, address account) external {
        if (!_roles[OWNER_ROLE][msg.sender]) revert OnlyOwner();
        if (_roles[role][account]) {
            _roles[role][account] = false;
            emit RoleRevoked(role, account, msg.sender);
        }
    }

    function _grant(bytes32 role, address account) private {
        if (!_roles[role][account]) {
            _roles[role][account] = true;
            emit RoleGranted(role, account, msg.sender);
        }
    }

    // ---------------------------------------------------------------------------------------- round and stage
    function currentRound() external view returns (uint256) {
        return _currentRound;
    }

    function currentStage() external view returns (uint256) {
        return _currentStage;
    }

    function stageCount() public pure returns (uint256) {
        return STAGE_COUNT;
    }

    function updateStageAndRound() external returns (uint256, uint256) {
        if (!_roles[STAGE_MANAGER_ROLE][msg.sender]) revert OnlyStageManager();
        if (_currentStage + 1 >= STAGE_COUNT) {
            _currentStage = 0;
            _currentRound += 1;
            emit RoundAdvanced(_currentRound);
        } else {
            _currentStage += 1;
        }
        emit StageAdvanced(_currentRound, _currentStage);
        return (_currentRound, _currentStage);
    }

    // ---------------------------------------------------------------------------------------------- bootnodes
    function addBootnodes(string[] calldata newBootnodes) external {
        if (!_roles[BOOTNODE_MANAGER_ROLE][msg.sender]) revert OnlyBootnodeManager();
        for (uint256 i = 0; i < newBootnodes.length; i++) {
            _bootnodes.push(newBootnodes[i]);
        }
        emit BootnodesAdded(msg.sender, newBootnodes.length);
    }

    function removeBootnode(uint256 index) external {
        if (!_roles[BOOTNODE_MANAGER_ROLE][msg.sender]) revert OnlyBootnodeManager();
        if (index >= _bootnodes.length) revert InvalidBootnodeIndex();
        _bootnodes[index] = _bootnodes[_bootnodes.length - 1];
        _bootnodes.pop();
        emit BootnodeRemoved(msg.sender, index);
    }

    function clearBootnodes() external {
        if (!_roles[BOOTNODE_MANAGER_ROLE][msg.sender]) revert OnlyBootnodeManager();
        delete _bootnodes;
        emit AllBootnodesCleared(msg.sender);
    }

    function getBootnodes() external view returns (string[] memory) {
        return _bootnodes;
    }

    function getBootnodesCount() external view returns (uint256) {
        return _bootnodes.length;
    }

    // ------------------------------------------------------------------------------------------ peer registry
    /// Binds a peer id to the calling wallet for good; registering it again from the same wallet is a no-op.
    function registerPeer(string calldata peerId) external {
        if (bytes(peerId).length == 0 || bytes(peerId).length > MAX_PEER_ID_BYTES) revert InvalidVoterPeerId();
        address owner = _peerToEoa[peerId];
        if (owner == msg.sender) return;
        if (owner != address(0)) revert PeerIdAlreadyRegistered();
        _peerToEoa[peerId] = msg.sender;
        _eoaToPeers[msg.sender].push(peerId);
        emit PeerRegistered(msg.sender, peerId);
    }

    function getEoa(string[] calldata peerIds) external view returns (address[] memory eoas) {
        eoas = new address[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) {
            eoas[i] = _peerToEoa[peerIds[i]];
        }
    }

    function getPeerId(address[] calldata eoas) external view returns (string[][] memory peerIds) {
        peerIds = new string[][](eoas.length);
        for (uint256 i = 0; i < eoas.length; i++) {
            peerIds[i] = _eoaToPeers[eoas[i]];
        }
    }

    // ------------------------------------------------------------------------------------------------ rewards
    function submitReward(uint256 roundNumber, uint256 stageNumber, int256 reward, string calldata peerId) external {
        if (roundNumber > _currentRound) revert InvalidRoundNumber();
        if (stageNumber >= STAGE_COUNT) revert InvalidStageNumber();
        if (_peerToEoa[peerId] != msg.sender) revert InvalidVoterPeerId();
        if (_rewardSubmitted[roundNumber][stageNumber][msg.sender]) revert RewardAlreadySubmitted();
        _rewardSubmitted[roundNumber][stageNumber][msg.sender] = true;
        _roundStageRewards[roundNumber][stageNumber][msg.sender] = reward;
        _totalRewards[peerId] += reward;
        emit RewardSubmitted(msg.sender, roundNumber, stageNumber, reward, peerId);
        emit CumulativeRewardsUpdated(msg.sender, peerId, _totalRewards[peerId]);
    }

    function getRoundStageReward(uint256 roundNumber, uint256 stageNumber, address[] calldata accounts)
        external view returns (int256[] memory rewards)
    {
        rewards = new int256[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) {
            rewards[i] = _roundStageRewards[roundNumber][stageNumber][accounts[i]];
        }
    }

    function hasSubmittedRoundStageReward(uint256 roundNumber, uint256 stageNumber, address account)
        external view returns (bool)
    {
        return _rewardSubmitted[roundNumber][stageNumber][account];
    }

    function getTotalRewards(string[] calldata peerIds) external view returns (int256[] memory rewards) {
        rewards = new int256[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) {
            rewards[i] = _totalRewards[peerIds[i]];
        }
    }

    // ------------------------------------------------------------------------------------------------ winners
    /// One vote per voter peer per round; winners must be distinct, registered peer ids.
    function submitWinners(uint256 roundNumber, string[] calldata winners, string calldata peerId) external {
        if (roundNumber > _currentRound) revert InvalidRoundNumber();
        if (_peerToEoa[peerId] != msg.sender) revert InvalidVoterPeerId();
        if (_votes[roundNumber][peerId].length > 0) revert WinnerAlreadyVoted();
        if (winners.length == 0 || winners.length > MAX_WINNERS) revert InvalidVote();
        for (uint256 i = 0; i < winners.length; i++) {
            if (_peerToEoa[winners[i]] == address(0)) revert InvalidVote();
            for (uint256 j = 0; j < i; j++) {
                if (keccak256(bytes(winners[i])) == keccak256(bytes(winners[j]))) revert InvalidVote();
            }
            _roundVoteCounts[roundNumber][winners[i]] += 1;
            _totalWins[winners[i]] += 1;
            if (!_wasVotedFor[winners[i]]) {
                _wasVotedFor[winners[i]] = true;
                uniqueVotedPeers += 1;
            }
            _votes[roundNumber][peerId].push(winners[i]);
        }
        _voterVoteCounts[peerId] += 1;
        if (!_hasVoted[peerId]) {
            _hasVoted[peerId] = true;
            uniqueVoters += 1;
        }
        emit WinnerSubmitted(msg.sender, peerId, roundNumber, winners);
    }

    function getVoterVotes(uint256 roundNumber, string calldata peerId) external view returns (string[] memory) {
        return _votes[roundNumber][peerId];
    }

    function getPeerVoteCount(uint256 roundNumber, string calldata peerId) external view returns (uint256) {
        return _roundVoteCounts[roundNumber][peerId];
    }

    function getTotalWins(string calldata peerId) external view returns (uint256) {
        return _totalWins[peerId];
    }

    function getVoterVoteCount(string calldata peerId) external view returns (uint256) {
        return _voterVoteCounts[peerId];
    }
}
