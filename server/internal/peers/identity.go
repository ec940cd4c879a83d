package peers

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/server/internal/raftlog"
)

// Cluster identity
//
// A member that lost its data directory has forgotten its vote and every
// entry it acknowledged. Were it to vote again under its old name, a
// candidate missing acknowledged entries could win with its vote, and a
// lease held by one client could be granted to another. So a member's data
// directory says whether the cluster may count on it (IdentityFileName):
//
//   - instance: random, drawn when the directory is first used. A member
//     that comes back on an empty directory has another one.
//   - cluster ID: random, agreed when the cluster forms (a hash of the
//     initial members' instances), given to each member added later. Every
//     peer connection, raft's and forwarded calls alike, starts with both
//     ends' IDs (mux.go); two different IDs refuse the connection. A
//     member that lost its directory cannot draw the same ID again.
//   - log ID: random, drawn with the instance and written into the raft
//     log's stable store before the identity file. A member whose identity
//     names a log it does not hold (wal/ deleted, replaced by another
//     directory's, or the identity file deleted while the log stayed)
//     refuses to start (ErrLostLog): its votes and acknowledgements are in
//     a log that is gone.
//   - votes: whether the directory holds state the cluster counts on. It
//     does once the member bootstrapped the cluster, once it was added
//     (fencectl member add) while running on this directory, and for a
//     directory written before this file existed. A member that does not
//     vote answers every vote and pre-vote request with a refusal, refuses
//     to start an election when leadership is handed to it, and sends no
//     vote requests (contactTransport), so it never counts toward an
//     election's quorum. It still stores the entries the leader sends: an
//     acknowledgement of an entry it holds is true whatever it forgot.
//
// How a member with an empty data directory starts:
//
//   - --initial-cluster-state new (the default) with --initial-cluster: it
//     asks every other initial member for its state before it bootstraps,
//     and waits until each has answered (a new cluster forms once all its
//     initial members have started). If one of them already belongs to the
//     cluster and this member's instance is not among the initial ones it
//     knows, this member has lost its directory: it refuses to start
//     (ErrMemberBootstrapped), as etcd does. A member that answered before
//     the others bootstrapped is among them, and bootstraps too.
//   - --initial-cluster-state existing, or --join: it waits to be added,
//     and does not vote until it is. A member that is still in the
//     configuration under its old instance keeps receiving the log but
//     never votes; fencectl member add refuses it until it is removed.
//
// Guarantees: a member never votes with a data directory it started empty
// unless the cluster added it afterwards (as a new member, with that
// directory's instance) or it formed the cluster with the other initial
// members. When the peers are down as a wiped member starts, it waits; when
// they come back it refuses. A cluster whose members have all lost their
// directories is a new cluster.
//
// Non-guarantees: a node started without an initial cluster has no peers
// to ask: on an empty data directory it forms a new cluster of one, even
// if it had grown into a larger cluster through member add (its former
// peers then refuse its connections, since its cluster ID is new; start
// such a node with --join after a loss). The identity file and the raft log are
// bound by one log ID (Identity.LogID, kept in both): deleting either, or
// mixing them with another directory's, is refused at start (ErrLostLog). A
// data directory written by a version before cluster IDs has no cluster ID:
// its connections are checked only against members that have one and carry
// a different one. fenced restore gives its members a new cluster ID
// (internal/restore), which the old cluster's members do not share. The peer port is trusted as
// before (peer TLS): a node that reaches it can claim any identity.

// IdentityFileName is the member's identity in its data directory.
const IdentityFileName = "member.json"

var (
	// ErrMemberBootstrapped means a member started on an empty data
	// directory to form a new cluster, but a peer already belongs to one
	// that counts this member with another data directory: this one was
	// lost or replaced. It must be removed and added back as a new member.
	ErrMemberBootstrapped = errors.New("member has already been bootstrapped")
	// ErrClusterMismatch means a peer belongs to another cluster: its
	// cluster ID differs from this member's. The connection is refused.
	ErrClusterMismatch = errors.New("peer belongs to another cluster")
	// ErrLostLog means the member's identity file and its raft log do not
	// belong together: the log was deleted, replaced or mixed with another
	// directory's. The member may have acknowledged entries it no longer
	// holds, so it does not start.
	ErrLostLog = errors.New("the raft log does not match the member's identity")
)

// RecoverySteps is the documented recovery of member id, whose raft
// address is addr ("" if unknown), after it lost its data directory.
func RecoverySteps(id, addr string) string {
	if addr == "" {
		addr = "RAFTHOST:PORT"
	}
	return fmt.Sprintf("remove it (fencectl member remove %s), empty its data directory, start it with --join "+
		"(and no --initial-cluster), then add it back (fencectl member add %s %s)", id, id, addr)
}

// MemberBootstrappedError says which peer knows this member with another
// data directory.
type MemberBootstrappedError struct {
	Node    string // this member
	Address string // this member's raft address
	Peer    string // the peer that belongs to the cluster, ID and address
}

func (e *MemberBootstrappedError) Error() string {
	return fmt.Sprintf("%v: %s is a member of a running cluster that counts %s with another data directory; "+
		"this one is new, so its votes and log were lost. To bring %s back: %s",
		ErrMemberBootstrapped, e.Peer, e.Node, e.Node, RecoverySteps(e.Node, e.Address))
}

func (e *MemberBootstrappedError) Is(target error) bool { return target == ErrMemberBootstrapped }

// LostLogError says how a data directory's identity and raft log disagree.
type LostLogError struct {
	Dir    string
	Reason string
}

func (e *LostLogError) Error() string {
	return fmt.Sprintf("%v in %s: %s. This member may have acknowledged entries and votes that it no longer holds, "+
		"so it will not start on this directory. A single node: restore the data directory with fenced restore. "+
		"In a cluster: %s", ErrLostLog, e.Dir, e.Reason, RecoverySteps("ID", ""))
}

func (e *LostLogError) Is(target error) bool { return target == ErrLostLog }

// ClusterMismatchError names the peer and both cluster IDs.
type ClusterMismatchError struct {
	Peer        string // the peer's node ID and address
	Cluster     string // this member's cluster ID
	PeerCluster string
}

func (e *ClusterMismatchError) Error() string {
	return fmt.Sprintf("%v: %s has the cluster ID %s, this member %s. The two belong to different clusters, "+
		"or one started a new cluster on an empty data directory; to bring such a member back: %s",
		ErrClusterMismatch, e.Peer, e.PeerCluster, e.Cluster, RecoverySteps("ID", ""))
}

func (e *ClusterMismatchError) Is(target error) bool { return target == ErrClusterMismatch }

// Identity is what the data directory says about the member (see above).
type Identity struct {
	Cluster  string `json:"clusterId,omitempty"`
	Instance string `json:"instance"`
	Votes    bool   `json:"votes"`
	// Initial maps each initial member's ID to its instance, as agreed
	// when the cluster formed; a peer that forms later checks its own
	// instance against it.
	Initial map[string]string `json:"initialMembers,omitempty"`
	// LogID is the ID of the raft log this member's promises live in,
	// written to the log's stable store with it (LogIDKey). An identity
	// whose log is gone or another's is refused (ErrLostLog).
	LogID string `json:"logId,omitempty"`
	// Backup is the SHA-256 of the backup a restored member was written
	// from (fenced restore); its cluster ID derives from it.
	Backup string `json:"backup,omitempty"`
}

// IdentityStore keeps the identity file of a data directory.
type IdentityStore struct {
	path  string
	mu    sync.Mutex
	id    Identity
	votes atomic.Bool // id.Votes, read on every vote request
	// cluster is id.Cluster, read on every API response
	// (Fenced-Cluster-Id).
	cluster atomic.Pointer[string]
}

// LogIDKey is the stable-store key under which the raft log keeps the log
// ID its identity file names (Identity.LogID).
var LogIDKey = []byte("FencedLogID")

// LogBinding is where the raft log keeps its log ID: raft's stable store,
// which lives with the log (raftlog.Store).
type LogBinding interface {
	Get(key []byte) ([]byte, error)
	Set(key, val []byte) error
}

// OpenIdentity reads dir's identity file and checks it against the raft
// log's log ID (log): a member whose identity names a log it no longer
// holds, or whose log belongs to another identity, is refused with
// ErrLostLog. A directory without either gets a new instance and log ID;
// one whose raft state predates both (hasState, no file, no log ID)
// votes, as it did before identity files existed.
func OpenIdentity(dir string, log LogBinding, hasState bool) (*IdentityStore, error) {
	s := &IdentityStore{path: filepath.Join(dir, IdentityFileName)}
	logID, err := log.Get(LogIDKey)
	if err != nil && !absent(err) {
		return nil, fmt.Errorf("read the raft log's ID: %w", err)
	}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if len(logID) > 0 {
			return nil, &LostLogError{Dir: dir, Reason: fmt.Sprintf(
				"%s is missing, but the raft log carries log ID %s: the identity file was deleted, or the log was copied from another data directory", IdentityFileName, logID)}
		}
		return s, s.bind(log, Identity{Instance: randomHex(16), Votes: hasState})
	case err != nil:
		return nil, fmt.Errorf("Identity file: %w", err)
	}
	if err := json.Unmarshal(b, &s.id); err != nil || s.id.Instance == "" {
		return nil, fmt.Errorf("Identity file %s is damaged (%v): %s", s.path, err, RecoverySteps("this member", ""))
	}
	s.votes.Store(s.id.Votes)
	s.cluster.Store(&s.id.Cluster)
	switch {
	case s.id.LogID == "" && len(logID) > 0:
		return nil, &LostLogError{Dir: dir, Reason: fmt.Sprintf(
			"the raft log carries log ID %s, but %s names none: the identity file is older than the log, or comes from another data directory", logID, IdentityFileName)}
	case s.id.LogID == "" && s.id.Votes && !hasState:
		return nil, &LostLogError{Dir: dir, Reason: fmt.Sprintf(
			"%s says this member votes, but the data directory holds no raft state: its log was lost", IdentityFileName)}
	case s.id.LogID == "":
		// Written before log IDs: bind the log it has now.
		return s, s.bind(log, s.id)
	case len(logID) == 0 && failpoint.Enabled(failpoint.LostLogVotes):
		return s, s.bind(log, s.id) // the mutant: a new log under the old identity
	case len(logID) == 0:
		return nil, &LostLogError{Dir: dir, Reason: fmt.Sprintf(
			"%s names raft log %s, but the data directory holds no raft log with an ID: the log was deleted or replaced", IdentityFileName, s.id.LogID)}
	case string(logID) != s.id.LogID:
		return nil, &LostLogError{Dir: dir, Reason: fmt.Sprintf(
			"%s names raft log %s, but the log in the data directory is %s: the two come from different data directories", IdentityFileName, s.id.LogID, logID)}
	}
	return s, nil
}

// absent reports whether err only says that a stable-store key is not
// there: raft's in-memory store says so with an error "not found", the
// WAL with no value and no error.
func absent(err error) bool { return err.Error() == "not found" }

// bind gives id a new log ID, writes it to the log first and then to the
// identity file: a crash between the two leaves a log ID that no identity
// names, which the next start refuses rather than guess.
func (s *IdentityStore) bind(log LogBinding, id Identity) error {
	id.LogID = randomHex(16)
	if err := log.Set(LogIDKey, []byte(id.LogID)); err != nil {
		return fmt.Errorf("write the raft log's ID: %w", err)
	}
	return s.Save(id)
}

func (s *IdentityStore) Get() Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// save writes id and makes it durable before it takes effect.
func (s *IdentityStore) Save(id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("Identity file: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = raftlog.SyncDir(filepath.Dir(s.path))
	}
	if err != nil {
		return fmt.Errorf("Identity file: %w", err)
	}
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
	s.votes.Store(id.Votes)
	s.cluster.Store(&id.Cluster)
	return nil
}

// join makes the member a voting member of cluster, with the initial
// members given; it refuses a member of another cluster.
func (s *IdentityStore) Join(cluster string, initial map[string]string) error {
	id := s.Get()
	if id.Votes && id.Cluster != cluster {
		return fmt.Errorf("%w: this member belongs to cluster %q, not %q", ErrClusterMismatch, id.Cluster, cluster)
	}
	id.Cluster, id.Votes, id.Initial = cluster, true, initial
	return s.Save(id)
}

// FormationID is the ID of a cluster formed by the members with these
// instances: every initial member computes the same one, and a member with
// a new instance cannot.
func FormationID(initial map[string]string) string {
	parts := make([]string, 0, len(initial))
	for node, inst := range initial {
		parts = append(parts, node+"="+inst)
	}
	sort.Strings(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return hex.EncodeToString(sum[:16])
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Cluster returns the cluster ID (Identity.Cluster), "" while the member
// belongs to none; it is read on every API response.
func (s *IdentityStore) Cluster() string {
	if p := s.cluster.Load(); p != nil {
		return *p
	}
	return ""
}

// Votes reports whether the member votes (Identity.Votes), read on every
// vote request.
func (s *IdentityStore) Votes() bool { return s.votes.Load() }
