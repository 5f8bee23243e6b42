// Package collector owns the fleet's mirror: it follows every configured
// host's chain over the NATS cluster (each host publishes under its own
// host-qualified subject space, busclient.HostSubject) and stores each host
// h verbatim in a mirror ledger of its own, Dir/hosts/<h>/
// (ledger.Options.Mirror), so that every read command, proof and verify
// works on a host's mirror as on the host's own directory.
//
// Design. One goroutine per host, nothing shared between hosts but the
// NATS connection: it subscribes to the host's event subjects into a
// bounded channel (Options.BufferLen), asks the host's head over the
// host's read-only API in the peer class, fills whatever the mirror lacks by
// replay, then imports live events in seq order. A message that finds the
// channel full is dropped by NATS (a slow consumer, counted in
// HostStatus.Dropped); the hole it leaves is found by seq (the
// subscription is unfiltered, so seqs are gapless) or by the next idle
// head poll (Options.PollInterval) and filled by replay. The mirror's own
// head is the only resume point: Import is atomic and idempotent, so a
// restart resumes exactly where the last durable import ended.
//
// Refusal. A host whose chain forks (an event at a mirrored seq differs,
// or the host's head hash differs from the mirror's at that seq: the host
// re-sealed its tail), whose chain breaks (a hash does not recompute, a
// malformed event) or whose host.bound event names another host is
// REFUSED: its mirroring stops, the finding is written to
// Dir/hosts/<h>/REFUSED.json (RefusedFile) and logged, and a collector
// started later keeps refusing that host until an operator removes the
// file. What was mirrored before the finding stays, and still verifies.
//
// Trust boundary. The collector verifies chain consistency (Import: hash,
// prev, gapless seqs; host.bound), stores only what the host's own API
// (head, replay) answers or confirms, and checks signed checkpoints
// (Options.Verifiers). Live messages are hints: a run is imported only once
// the host's replay of its last seq returns that event byte for byte (its
// hash seals the run), one that contradicts the mirror is judged by the
// host's replay of its seq, and one the replay does not confirm is counted
// (HostStatus.LiveRejected), never a refusal. API answers are not
// authenticated: a hub (leaf nodes) must admit only the fleet's hosts as
// publishers and responders in their spaces; only signed checkpoints
// authenticate a host.
//
// Discovery. With Options.Discover (host id patterns), hosts already
// under Dir/hosts that match are mirrored at Start, and a host that
// announces itself on the cluster (busclient.AnnounceSubject, which only
// its own bus may publish) with a matching id is added while the
// collector runs (AddHost, Options.OnHostAdded) once its own head API
// answers, up to MaxHosts. A host already mirrored is never added again,
// so an announcement never un-refuses a host (discover.go).
//
// Checkpoints. With a verifier for a host (Options.Verifiers), the signed
// checkpoints it publishes are checked too: one whose signature verifies
// is compared with the mirror (Merkle root and chain hash at its size) as
// soon as the mirror holds that size; a difference refuses the host — it
// signed a history other than the one it served. Each host's latest
// checkpoint that matches the mirror (signature verified when the host has
// a verifier; without one, checked against the mirror only) is handed,
// untouched, to Options.OnCheckpoint: the collector signs nothing, and
// collect republishes the hosts' own on its fleet bus.
//
// Guarantees (each checked by the test named after it):
//   - Every mirrored event was verified against its host's chain before it
//     was stored: ledger.Import checks envelope, hash and prev, and the
//     collector checks host.bound (TestMirrorEqualsSource,
//     TestWrongHostBoundRefused); the live path stores exactly what the
//     replay path stores (TestLiveEqualsReplay, the twin).
//   - A live message that is not the host's (junk, a forged event chained
//     onto the mirror, a fork of a mirrored event) neither refuses the host
//     nor is stored (TestForgedLiveMessageDoesNotRefuse,
//     TestForgedLiveEventNotImported; from a hub client in the leaf setup:
//     TestForgedLiveFromHubClient).
//   - Exactly once per (host, seq), gapless, across restarts of the
//     collector (TestMirrorEqualsSource, TestCollectorRestartMidStream).
//   - A host that is down, partitioned or slow never delays another
//     host's mirroring: one goroutine per host, a bounded per-host buffer
//     whose overflow is a recorded drop filled by replay, never a block
//     (TestSlowHostDoesNotBlockOthers, TestBufferOverflowFilledByReplay,
//     TestHostRestartHolesFilled).
//   - A host whose chain forks, breaks or names another host in host.bound
//     is refused with a persisted finding and stays refused across
//     restarts (TestForkedHostRefused, TestBrokenChainRefused,
//     TestWrongHostBoundRefused).
//   - A signed checkpoint of a host with a verifier that contradicts the
//     mirror refuses the host; one whose signature does not verify is
//     counted and ignored (TestCheckpointsChecked).
//   - Options.OnCheckpoint receives a host's checkpoint, byte for byte,
//     only once the mirror holds its size and matches its root and chain
//     hash (and its signature verifies, with a verifier), and only when it
//     is larger than the last one handed on; one the mirror contradicts is
//     counted, not handed on (TestCheckpointsHandedOn).
//   - A mirror opened through Options.OpenMirror (a live projection over
//     it, say) is the ledger the collector imports into, and its closer
//     is called once at Close (TestOpenMirrorHook).
//   - Per-host lag and rejected live messages are exposed: Prometheus
//     metrics and the /status JSON of Handler (TestStatusAndMetrics).
//   - Junk on a host's event subjects never keeps a host that went away
//     "live": the head is polled unless an import moved the mirror
//     (TestJunkLiveDoesNotHoldStoppedHostLive).
//   - A host that answers no peer-class request but answers the bare API
//     is mirrored in the bare class (TestHostWithoutPeerClassMirrored).
//   - A host started after the collector whose id matches a discovery
//     pattern is mirrored without a restart, byte for byte; one that
//     matches no pattern is not (TestDiscoveredHostMirrored).
//   - An announcement never un-refuses a host: a host refused for a fork
//     stays refused, its mirror unchanged, across a restart with discovery
//     while it keeps announcing (TestDiscoveryKeepsRefusedHost).
//   - Two collectors mirroring the same hosts, each through its own peer
//     into its own directory, hold identical mirrors, byte for byte
//     (TestRedundantCollectorsAgree).
//   - A REFUSED.json that is not a regular file or is larger than
//     MaxFindingBytes is an error, never a hang or an unbounded read
//     (TestReadFindingFIFO, TestReadFindingDevice, TestReadFinding).
package collector
