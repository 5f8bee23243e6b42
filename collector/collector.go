package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

// Bounds and defaults.
const (
	// DefaultBufferLen bounds the live messages held per host between the
	// NATS subscription and the importer. A full buffer never blocks: NATS
	// drops the message (HostStatus.Dropped counts it) and the hole is
	// filled by replay.
	DefaultBufferLen = 8192
	// DefaultImportBatchEvents bounds the events handed to one
	// ledger.Import call (one synced batch).
	DefaultImportBatchEvents = 1024
	// DefaultPollInterval is how long a host may stay silent before its
	// head is asked again: it finds a hole at the tail (a dropped last
	// message) and tells a host that went away (unreachable).
	DefaultPollInterval = time.Second
	// MaxPendingCheckpoints bounds the verified checkpoints of one host
	// waiting for the mirror to reach their size; beyond it the oldest is
	// dropped (HostStatus.CheckpointsDropped counts it).
	MaxPendingCheckpoints = 64
	// MaxHosts bounds the hosts one collector mirrors (one goroutine, one
	// mirror ledger and one subscription each).
	MaxHosts = 1024
	// HostsDir is the subdirectory of Options.Dir holding one mirror
	// ledger directory per host.
	HostsDir = "hosts"
)

// Errors callers branch on.
var (
	// ErrOptions: the Options are unusable (no Dir, no Conn, no or too many
	// hosts, an invalid or repeated host id).
	ErrOptions = errors.New("collector: invalid options")
	// ErrClosed: the collector was closed.
	ErrClosed = errors.New("collector: closed")
)

// Options configures Start.
type Options struct {
	// Dir is the collector's directory; host h is mirrored in
	// Dir/hosts/<h>/ (HostDir). Required.
	Dir string
	// Hosts are the host ids to mirror (events.ValidID each). Required
	// unless Discover is set.
	Hosts []string
	// Discover, when set, turns host discovery on (discover.go): each is
	// a pattern of host ids (path.Match syntax; "*" matches every id, what
	// collect --hosts auto gives). At Start the host directories already
	// under Dir/hosts whose id matches one are mirrored besides Hosts (a
	// refused one stays refused); while the collector runs, a host that
	// announces itself (busclient.AnnounceSubject) with a matching id is
	// added (AddHost) once its own head API answers, up to MaxHosts hosts
	// in all.
	Discover []string
	// OnHostAdded, when set, is called with each host added while the
	// collector runs (AddHost, discovery) and its mirror, before that
	// host's mirroring starts, from the adding goroutine; it must not
	// block for long. collect serves the new mirror on its fleet bus.
	OnHostAdded func(host string, mirror *ledger.Ledger)
	// Conn is a bus.Peer's Connect connection to the cluster: it may read
	// every host's event subjects and call its read-only API in the peer
	// class (busclient.Client.WithPeerClass), which no other client may.
	// The collector does not close it. Required.
	Conn *nats.Conn
	// BufferLen bounds each host's live buffer; DefaultBufferLen when zero.
	BufferLen int
	// ImportBatchEvents bounds one Import call; DefaultImportBatchEvents
	// when zero (at most ledger.MaxAppendEvents).
	ImportBatchEvents int
	// PollInterval is the idle time after which a host's head is asked;
	// DefaultPollInterval when zero.
	PollInterval time.Duration
	// PollTimeout bounds each head poll: a host whose head does not
	// answer within it is unreachable, so a host that died or hangs is
	// found within about PollInterval + PollTimeout, not the client's
	// request timeout (busclient.DefaultRequestTimeout). PollInterval when
	// zero.
	PollTimeout time.Duration
	// Verifiers, by host, check the signed checkpoints a host publishes
	// (busclient.CheckpointSubject in its space, serve --checkpoint-key):
	// each whose signature verifies is compared with the mirror — its
	// Merkle root and chain hash at the checkpoint's size — once the
	// mirror holds that size; a difference refuses the host
	// (ReasonCheckpoint). Hosts without one are not refused by
	// checkpoints (see OnCheckpoint).
	Verifiers map[string]note.Verifier
	// OnCheckpoint, when set, receives each host's latest signed
	// checkpoint that the mirror holds and matches: its Merkle root and
	// chain hash at the checkpoint's size are the mirror's, and its
	// signature verifies when the host has a verifier (a checkpoint of a
	// host without one is checked against the mirror only; one the mirror
	// contradicts is counted in HostStatus.CheckpointsRejected and never
	// handed on). It is called from the host's goroutine each time such a
	// checkpoint is larger than the last one handed on (so in order of
	// growing size), with the host's bytes untouched — the collector signs
	// nothing; it must not block for long. collect republishes them on its
	// fleet bus.
	OnCheckpoint func(host string, signed []byte)
	// OpenMirror opens host's mirror ledger with opts (Dir is the host's
	// HostDir, Mirror is set) and returns it with what closes it (nil:
	// the ledger's own Close). The collector imports into that ledger and
	// closes it through the closer at Close. It lets a caller wrap each
	// mirror (a live projection over it) without the collector knowing
	// the wrapper; ledger.Open when nil.
	OpenMirror func(ctx context.Context, host string, opts ledger.Options) (*ledger.Ledger, io.Closer, error)
	// Now is the clock of findings; time.Now when nil.
	Now func() time.Time
	// Logger receives findings and host state changes; slog.Default when
	// nil.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" || o.Conn == nil {
		return o, fmt.Errorf("%w: Dir and Conn are required", ErrOptions)
	}
	if len(o.Hosts) == 0 && len(o.Discover) == 0 || len(o.Hosts) > MaxHosts {
		return o, fmt.Errorf("%w: %d hosts, want 1 to MaxHosts=%d (or host discovery)", ErrOptions, len(o.Hosts), MaxHosts)
	}
	if len(o.Discover) > MaxDiscoverPatterns {
		return o, fmt.Errorf("%w: %d discovery patterns, at most MaxDiscoverPatterns=%d", ErrOptions, len(o.Discover), MaxDiscoverPatterns)
	}
	for _, p := range o.Discover {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return o, fmt.Errorf("%w: discovery pattern %q: want a path.Match pattern of host ids", ErrOptions, p)
		}
	}
	seen := map[string]bool{}
	for _, h := range o.Hosts {
		if !events.ValidID(h) {
			return o, fmt.Errorf("%w: host id %q: want %s", ErrOptions, h, events.IDRule)
		}
		if seen[h] {
			return o, fmt.Errorf("%w: host %q listed twice", ErrOptions, h)
		}
		seen[h] = true
	}
	for h := range o.Verifiers {
		if !seen[h] && !o.discovers(h) || o.Verifiers[h] == nil {
			return o, fmt.Errorf("%w: a checkpoint verifier for %q, which is not a mirrored host", ErrOptions, h)
		}
	}
	if o.BufferLen <= 0 {
		o.BufferLen = DefaultBufferLen
	}
	if o.ImportBatchEvents <= 0 {
		o.ImportBatchEvents = DefaultImportBatchEvents
	}
	o.ImportBatchEvents = min(o.ImportBatchEvents, ledger.MaxAppendEvents)
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = o.PollInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OpenMirror == nil {
		o.OpenMirror = func(_ context.Context, _ string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
			l, err := ledger.Open(lo)
			return l, nil, err
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// HostDir is the mirror ledger directory of host under a collector
// directory.
func HostDir(dir, host string) string { return filepath.Join(dir, HostsDir, host) }

// Collector mirrors a fleet of hosts. It is safe for concurrent use.
type Collector struct {
	opts    Options
	started time.Time // Options.Now at Start: the age of a host never heard
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // every host's goroutine and the discovery's

	mu     sync.Mutex
	hosts  []*hostMirror   // in Options.Hosts order, then as added
	known  map[string]bool // hosts mirrored or being added (AddHost)
	closed bool            // Close began: nothing more is added or started

	closeOnce sync.Once
	closeErr  error
}

// Start creates the collector's directory when missing, opens (creating
// when missing) every host's mirror ledger, loads the findings of hosts
// refused earlier (they stay refused) and starts one mirroring goroutine
// per other host. Close stops them.
func Start(opts Options) (*Collector, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// With discovery and no host known yet, no mirror creates it, and the
	// caller writes beside the mirrors (the fleet bus's URL file).
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	c := &Collector{opts: opts, started: opts.Now(), known: map[string]bool{}}
	hosts := slices.Clone(opts.Hosts)
	found, err := c.mirroredBefore()
	if err != nil {
		return nil, err
	}
	for _, h := range found {
		if !slices.Contains(hosts, h) && len(hosts) < MaxHosts {
			hosts = append(hosts, h)
		}
	}
	for _, h := range hosts {
		hm, err := openHost(context.Background(), opts, h)
		if err != nil {
			c.closeLedgers()
			return nil, err
		}
		c.hosts = append(c.hosts, hm)
		c.known[h] = true
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	initial := slices.Clone(c.hosts) // the discovery appends to c.hosts from now on
	if err := c.startDiscovery(); err != nil {
		c.cancel()
		c.closeLedgers()
		return nil, err
	}
	for _, hm := range initial {
		if c.refused(hm) {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			hm.run(c.ctx)
		}()
	}
	return c, nil
}

// refused reports (and logs) that hm stays refused: its mirroring is not
// started.
func (c *Collector) refused(hm *hostMirror) bool {
	if hm.status().State != StateRefused {
		return false
	}
	c.opts.Logger.Error("collector: host stays refused until its finding is removed", "host", hm.host, "file", hm.refusedPath())
	return true
}

func openHost(ctx context.Context, opts Options, h string) (*hostMirror, error) {
	dir := HostDir(opts.Dir, h)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("collector: host %s: %w", h, err)
	}
	f, err := ReadFinding(dir)
	if err != nil {
		return nil, fmt.Errorf("collector: host %s: %w", h, err)
	}
	l, closer, err := opts.OpenMirror(ctx, h, ledger.Options{Dir: dir, Mirror: true, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("collector: host %s: open mirror: %w", h, err)
	}
	if closer == nil {
		closer = l
	}
	hm := newHostMirror(opts, h, dir, l)
	hm.closer = closer
	if f != nil {
		hm.st.State, hm.st.Finding = StateRefused, f
	}
	return hm, nil
}

// Dir is the collector's directory (Options.Dir).
func (c *Collector) Dir() string { return c.opts.Dir }

// Hosts returns the mirrored host ids, in the order of Options.Hosts,
// then of those found in Dir (discovery) and added since.
func (c *Collector) Hosts() []string {
	var out []string
	for _, hm := range c.mirrors() {
		out = append(out, hm.host)
	}
	return out
}

// mirrors is a snapshot of the hosts mirrored.
func (c *Collector) mirrors() []*hostMirror {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.hosts)
}

// Mirror returns host's mirror ledger (for reads: Import is the
// collector's; nil for an unknown host). It stays open until Close.
func (c *Collector) Mirror(host string) *ledger.Ledger {
	for _, hm := range c.mirrors() {
		if hm.host == host {
			return hm.l
		}
	}
	return nil
}

// Close stops mirroring, waits for every host's goroutine and closes the
// mirror ledgers. It is idempotent.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		c.closeErr = c.closeLedgers()
	})
	return c.closeErr
}

func (c *Collector) closeLedgers() error {
	var errs []error
	for _, hm := range c.mirrors() {
		if err := hm.closer.Close(); err != nil {
			errs = append(errs, fmt.Errorf("collector: host %s: %w", hm.host, err))
		}
	}
	return errors.Join(errs...)
}
