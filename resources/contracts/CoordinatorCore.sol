// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title The state and rules shared by every SwarmCoordinator interface version this repository builds
/// @notice Roles, the round and stage clock with a configurable number of stages per round, bootnodes, the peer
/// registry, winner votes, and reward bookkeeping under a key that each interface version chooses (the wallet in
/// the 0.4.2 interface, the peer id from 0.4.3 on). The deployable contracts (SwarmCoordinator.sol, and the
/// older interfaces in LegacyCoordinators.sol that the client's tests run against) only add their public entry
/// points. Written from the public ABIs (function signatures, events, errors); the behaviour is our own.
abstract contract CoordinatorCore {
    bytes32 public constant OWNER_ROLE = keccak256("OWNER_ROLE");
    bytes32 public constant STAGE_MANAGER_ROLE = keccak256("STAGE_MANAGER_ROLE");
    bytes32 public constant BOOTNODE_MANAGER_ROLE = keccak256("BOOTNODE_MANAGER_ROLE");
    uint256 internal constant MAX_PEER_ID_BYTES = 128;
    uint256 internal constant MAX_WINNERS = 16;
    uint256 internal constant MAX_STAGES = 16;

    uint256 private immutable _stageCount;
    uint256 private _currentRound;
    uint256 private _currentStage;
    mapping(bytes32 => mapping(address => bool)) private _roles;

    string[] private _bootnodes;

    mapping(string => address) private _peerToEoa;
    mapping(address => string[]) private _eoaToPeers;

    // round -> stage -> submitter key (see _walletKey / _peerKey) -> submitted
    mapping(uint256 => mapping(uint256 => mapping(bytes32 => bool))) private _rewardSubmitted;
    // round -> stage -> wallet -> sum of the rewards its peers submitted for that stage
    mapping(uint256 => mapping(uint256 => mapping(address => int256))) private _roundStageRewards;
    mapping(string => int256) private _totalRewards;

    mapping(uint256 => mapping(string => string[])) private _votes; // round -> voter peer -> winners
    mapping(uint256 => mapping(string => uint256)) internal _roundVoteCounts; // round -> winner -> votes
    mapping(string => uint256) internal _totalWins;
    mapping(string => uint256) internal _voterVoteCounts;
    string[] internal _voters; // every peer that ever voted, in order of its first vote
    string[] internal _votedPeers; // every peer that was ever voted for, in order of its first win
    mapping(string => bool) private _hasVoted;
    mapping(string => bool) private _wasVotedFor;

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

    constructor(uint256 stages) {
        require(stages >= 1 && stages <= MAX_STAGES, "stage count must be between 1 and 16");
        _stageCount = stages;
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

    /// How many stages make one round (fixed at deployment).
    function stageCount() public view virtual returns (uint256) {
        return _stageCount;
    }

    /// Moves the clock one stage on; after the last stage of a round the next round begins at stage 0.
    function updateStageAndRound() external returns (uint256, uint256) {
        if (!_roles[STAGE_MANAGER_ROLE][msg.sender]) revert OnlyStageManager();
        if (_currentStage + 1 >= stageCount()) {
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
    /// One wallet may register several peer ids (one per node it runs).
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
    /// Rewards are keyed per wallet: one reward per wallet, round and stage, whichever of its peers sends it.
    function _walletKey(address account) internal pure returns (bytes32) {
        return bytes32(uint256(uint160(account)));
    }

    /// Rewards are keyed per peer id: each node of a wallet submits its own.
    function _peerKey(string memory peerId) internal pure returns (bytes32) {
        return keccak256(bytes(peerId));
    }

    /// A reward for a (round, stage) that has begun, from the wallet that owns ``peerId``, once per ``key``.
    function _submitReward(uint256 roundNumber, uint256 stageNumber, int256 reward, string calldata peerId, bytes32 key)
        internal
    {
        if (roundNumber > _currentRound) revert InvalidRoundNumber();
        if (stageNumber >= stageCount()) revert StageOutOfBounds();
        if (roundNumber == _currentRound && stageNumber > _currentStage) revert InvalidStageNumber();
        if (_peerToEoa[peerId] != msg.sender) revert InvalidVoterPeerId();
        if (_rewardSubmitted[roundNumber][stageNumber][key]) revert RewardAlreadySubmitted();
        _rewardSubmitted[roundNumber][stageNumber][key] = true;
        _roundStageRewards[roundNumber][stageNumber][msg.sender] += reward;
        _totalRewards[peerId] += reward;
        emit RewardSubmitted(msg.sender, roundNumber, stageNumber, reward, peerId);
        emit CumulativeRewardsUpdated(msg.sender, peerId, _totalRewards[peerId]);
    }

    function _toSigned(uint256 reward) internal pure returns (int256) {
        require(reward <= uint256(type(int256).max), "reward does not fit in int256");
        return int256(reward);
    }

    function _rewardWasSubmitted(uint256 roundNumber, uint256 stageNumber, bytes32 key) internal view returns (bool) {
        return _rewardSubmitted[roundNumber][stageNumber][key];
    }

    function getRoundStageReward(uint256 roundNumber, uint256 stageNumber, address[] calldata accounts)
        external view returns (int256[] memory rewards)
    {
        rewards = new int256[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) {
            rewards[i] = _roundStageRewards[roundNumber][stageNumber][accounts[i]];
        }
    }

    function getTotalRewards(string[] calldata peerIds) external view returns (int256[] memory rewards) {
        rewards = new int256[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) {
            rewards[i] = _totalRewards[peerIds[i]];
        }
    }

    // ------------------------------------------------------------------------------------------------ winners
    /// One vote per voter peer and round (not per stage); winners must be distinct, registered peer ids.
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
                _votedPeers.push(winners[i]);
            }
            _votes[roundNumber][peerId].push(winners[i]);
        }
        _voterVoteCounts[peerId] += 1;
        if (!_hasVoted[peerId]) {
            _hasVoted[peerId] = true;
            _voters.push(peerId);
        }
        emit WinnerSubmitted(msg.sender, peerId, roundNumber, winners);
    }

    function getVoterVotes(uint256 roundNumber, string calldata peerId) external view returns (string[] memory) {
        return _votes[roundNumber][peerId];
    }

    function getTotalWins(string calldata peerId) external view returns (uint256) {
        return _totalWins[peerId];
    }

    function getVoterVoteCount(string calldata peerId) external view returns (uint256) {
        return _voterVoteCounts[peerId];
    }

    function uniqueVoters() external view returns (uint256) {
        return _voters.length;
    }
}

/// The reward entry points of the interfaces that key rewards by peer id (0.4.3 and newer): every node of a wallet
/// submits its own reward, through either overload.
abstract contract PeerKeyedRewards is CoordinatorCore {
    function submitReward(uint256 roundNumber, uint256 stageNumber, int256 reward, string calldata peerId) external {
        _submitReward(roundNumber, stageNumber, reward, peerId, _peerKey(peerId));
    }

    function submitReward(uint256 roundNumber, uint256 stageNumber, uint256 reward, string calldata peerId) external {
        _submitReward(roundNumber, stageNumber, _toSigned(reward), peerId, _peerKey(peerId));
    }

    function hasSubmittedRoundStageReward(uint256 roundNumber, uint256 stageNumber, string calldata peerId)
        external view returns (bool)
    {
        return _rewardWasSubmitted(roundNumber, stageNumber, _peerKey(peerId));
    }
}
