package ledger

// The stages of the commit pipeline and their hand-offs. The invariants the
// pipeline keeps are listed at the top of commit.go.
//
// Group commit in three overlapped stages, each on its own goroutine:
//
//	committer: seals every request that arrives into the open batch (seqs,
//	           ULIDs, times, chain hashes, index entries, Merkle nodes);
//	applier:   applies a closed batch to Pebble with a Sync commit (WAL
//	           write and memtable insertion: about as costly as sealing),
//	           which requests the batch's fsync without waiting for it;
//	syncer:    awaits each applied batch's fsync in order, publishes the
//	           head, runs BeforeAck, publishes the acknowledged head, queues
//	           the batch for the Watch observers, wakes the appenders.
//
// The committer closes the open batch and hands it to the applier once it
// holds both permissions to: the applier is idle (applierIdle), and a token
// is free — each batch past the committer whose fsync the syncer has not yet
// observed holds one of inflightBatches tokens. So while batch N's fsync
// runs, batch N+1 is closed and applied, then N+2, each holding what
// arrived while the one before was applied: Pebble's WAL writer runs one
// fsync at a time, and the next one covers everything written before it
// starts, so every batch applied during N's fsync shares the next one,
// which starts as soon as N's ends. The disk never idles for the hand-offs
// between the stages (syncer to committer to applier), and under load a
// batch closes after one apply rather than after one fsync. Each batch is
// acknowledged only when its own SyncWait returns: an earlier batch's
// fsync vouches for nothing written after it began (TestAckAwaitsOwnFsync).
//
// A batch's failure (Pebble refuses the commit, the sync fails) is the
// ledger's sticky failure; the syncer fails that batch and every later one
// in order, whatever their own fsync said (TestFailedFsyncFailsLaterBatches).
// A later batch is never durable without the failed one in a way a reopen
// would see as a gap: Pebble's WAL is one log, replayed in order up to its
// first damaged record, and after a failed write or sync its writer writes
// nothing more.
//
// The committer never waits for Pebble's memtable insertion
// (TestCommitterSealsWhileApplyHeld holds a batch in the applier): it goes
// on sealing the next batch meanwhile, so that with large batches sealing
// and insertion proceed side by side instead of one after the other. The
// applier changes nothing of a batch's content: the stored bytes are those
// the sealing wrote, whichever goroutine applies them and however many
// batches are in flight (TestPipelinedApplyTwin compares the pipeline with
// the sequential one: the committer applying each batch itself, one batch
// past it at a time).

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// inflightBatches is how many batches may be past the committer (applied,
// or being applied) with their fsync not yet observed by the syncer. One
// is classic group commit, where the next batch is applied only once the
// previous fsync is observed. More lets the batches applied during one
// fsync share the next. Past the bound the open batch waits for the oldest
// fsync, and what it holds then waits for one fsync more than in classic
// group commit: a bound the batches of one fsync exhaust costs more than
// the overlap gains (BenchmarkCommitOverlap, 16 writers of one event: 0.83
// of classic's calls per second with 4, 0.9 with 8, 1.00–1.18 with 16, and
// 1.5–1.7 with 16 while other goroutines keep the cores busy). A batch
// holds what arrived while the one before was applied, so with few writers
// most batches hold one call, each costing its Pebble commit and hand-offs
// (there, 1.27–1.34 times classic's CPU per event). Sixteen batches of at
// most MaxBatchEvents keep memory bounded when fsyncs stall.
const inflightBatches = 16

// committer owns the chain state (tail, lastT, entropy) and the open batch.
// Closing l.inflight when it returns stops the applier, then the syncer.
func (l *Ledger) committer(syncerDone <-chan struct{}) {
	defer close(l.done)
	defer func() { <-syncerDone }()
	defer close(l.inflight)
	c := &committerLocal{}
	var open *pending
	for {
		if open != nil && c.token && c.idle {
			l.flush(c, open)
			open = nil
			continue
		}
		// The permissions are taken only for an open batch: a nil channel
		// is never ready.
		var token, idle <-chan struct{}
		if open != nil && !c.token {
			token = l.token
		}
		if open != nil && !c.idle {
			idle = l.applierIdle
		}
		select {
		case r := <-l.queue:
			open = l.add(c, open, r)
		case <-token:
			c.token = true
		case <-idle:
			c.idle = true
		case <-l.stop:
			l.drainOnStop(c, open)
			return
		}
	}
}

// awaitFlush returns once the committer holds both permissions to flush: a
// token and the idle applier. It calls hookTokenWait before it blocks.
func (l *Ledger) awaitFlush(c *committerLocal) {
	l.tryPermissions(c)
	if c.token && c.idle {
		return
	}
	l.opts.hooks.call(hookTokenWait)
	for !c.token || !c.idle {
		var token, idle <-chan struct{}
		if !c.token {
			token = l.token
		}
		if !c.idle {
			idle = l.applierIdle
		}
		select {
		case <-token:
			c.token = true
		case <-idle:
			c.idle = true
		}
	}
}

// tryPermissions takes the permissions to flush that are free now.
func (l *Ledger) tryPermissions(c *committerLocal) {
	if !c.token {
		select {
		case <-l.token:
			c.token = true
		default:
		}
	}
	if !c.idle {
		select {
		case <-l.applierIdle:
			c.idle = true
		default:
		}
	}
}

// drainOnStop runs after Close set closed under the write lock, so nothing
// is being enqueued any more: it seals what is left and flushes it.
func (l *Ledger) drainOnStop(c *committerLocal, open *pending) {
	for {
		select {
		case r := <-l.queue:
			open = l.add(c, open, r)
			continue
		default:
		}
		break
	}
	if open != nil {
		l.awaitFlush(c)
		l.flush(c, open)
	}
}

// flush closes the open batch: it writes the head and tree size, and hands
// the batch to the applier. The caller holds both permissions (awaitFlush),
// which the batch takes: the applier returns applierIdle once it applied
// it, the syncer the token once its fsync is observed (or it failed). With
// the hook hookInlineApply set, the committer applies the batch itself
// instead (the sequential reference of the twin test).
//
// A batch of retries only (p.batch nil) writes nothing, not even m/head and
// m/tree, which it would leave unchanged: it still passes the applier and
// the syncer, which is what orders its wake-up after the batches before it.
func (l *Ledger) flush(c *committerLocal, p *pending) {
	c.token, c.idle = false, false
	if p.batch != nil {
		c.index.writeTo(p.batch)
		_ = p.batch.Set([]byte(keys.Head), keys.EncodeHead(p.head.Seq, p.head.Hash), nil)
		_ = p.batch.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(p.head.Seq), nil)
		c.batchBytes = p.batch.Len()
	}
	if len(p.records) > 0 {
		c.keepFlushed(p.records, l.Head().Seq)
		c.batchEvents = len(p.records)
	}
	if h := l.opts.hooks; h != nil && h[hookInlineApply] != nil {
		if p.batch != nil {
			h.call(hookInlineApply) // counts Pebble commits (the twin test)
		}
		l.applyBatch(p)
		p.applied = true
	}
	l.inflight <- p // never waits: the applier is idle, its permission is here
}

// applier applies the batches the committer closes (l.inflight), in order,
// hands each to the syncer (applied) and tells the committer it is idle. It
// closes applied once the committer has closed l.inflight and everything in
// it is handed on.
func (l *Ledger) applier(applied chan<- *pending) {
	defer close(applied)
	for p := range l.inflight {
		if !p.applied {
			l.applyBatch(p)
		}
		applied <- p                // never waits: it holds inflightBatches, one per token
		l.applierIdle <- struct{}{} // never waits: flush took it
	}
}

// applyBatch applies p with a Sync commit whose fsync it does not await.
// When p cannot be applied (an earlier batch failed, or Pebble refuses it)
// it sets p.err, the ledger's sticky failure, for the syncer to fail p's
// appenders in their turn.
func (l *Ledger) applyBatch(p *pending) {
	l.opts.hooks.call(hookApply)
	err := l.failed() // an earlier batch failed: applying this one would leave a gap
	if err == nil && p.batch != nil {
		p.appliedAt = time.Now()
		if aerr := l.db.ApplyNoSyncWait(p.batch, pebble.Sync); aerr != nil {
			err = l.fail(fmt.Errorf("commit: %w", aerr))
		}
	}
	p.err = err
	if err == nil {
		l.opts.hooks.call(hookApplied)
	}
}

// syncer starts the applier, waits for each applied batch's fsync in order,
// publishes the new durable head, returns the batch's token, runs
// BeforeAck, publishes the acknowledged head, queues the batch for the
// Watch observers and wakes the batch's appenders.
func (l *Ledger) syncer(done chan<- struct{}) {
	defer close(done)
	applied := make(chan *pending, inflightBatches)
	go l.applier(applied)
	for p := range applied {
		err := p.err
		if p.batch != nil { // nil: retries only, nothing written
			if err == nil {
				l.opts.hooks.call(hookSyncWait)
				err = p.batch.SyncWait()
			}
			p.batch.Close()
		}
		if err == nil {
			// The ledger failed since the batch was applied (a Pebble fatal
			// error, see pebbleLogger, or a batch after it refused): Pebble
			// returned, but vouches for nothing.
			err = l.failed()
		}
		if err != nil {
			if p.err == nil {
				err = l.fail(fmt.Errorf("sync: %w", err))
			}
			l.token <- struct{}{}
			for _, r := range p.reqs {
				r.acks, r.err = nil, err
				close(r.done)
			}
			continue
		}
		head := p.head
		l.head.Store(&head)
		if p.batch != nil {
			l.commits.Add(1)
			l.eventsDone.Add(uint64(len(p.records)))
			l.commitNanos.Add(uint64(time.Since(p.appliedAt)))
		}
		// Another batch may be closed now: this one's fsync is observed,
		// and this goroutine acknowledges batches in order.
		l.token <- struct{}{}
		if l.opts.BeforeAck != nil && len(p.records) > 0 {
			handPayloads(p.records) // only those of calls still waiting (payload.go)
			l.opts.BeforeAck.Committed(p.records)
		}
		// Once acknowledged the payloads are their appenders' again: Watch
		// observers, which run after, never see them (payload.go).
		takePayloads(p.records)
		// After BeforeAck: the committer answers a retry of these events at
		// once only from now on (add).
		l.acked.Store(uint64(head.Seq))
		// The Watch observers are handed the batch before its appenders
		// are woken, not after: of the goroutines this one makes runnable,
		// the scheduler runs the last one first on this core once the
		// syncer waits again, and an appender is what a caller waits for
		// (woken first, it waited behind the observer's goroutine).
		// Waking gives no order either way: an observer's goroutine may
		// run before or after the appender's.
		if len(p.records) > 0 { // none: only retries of keyed appends
			l.notifyObservers(p.records) // queued: never waits for an observer
		}
		for _, r := range p.reqs {
			close(r.done)
		}
		l.opts.hooks.call(hookWoken)
	}
}

// Points of the pipeline a test can wait for (see Options.hooks).
const (
	// hookQueueFull: an appender found the queue full and is about to block.
	hookQueueFull = iota
	// hookTokenWait: the committer holds a call that does not fit the open
	// batch (or Close is draining), a permission to flush is missing (no
	// token is free, or the applier is busy), and it is about to block
	// until it has both.
	hookTokenWait
	// hookCloseWaitsReaders: Close has stopped the committer and is about
	// to wait for reads in progress.
	hookCloseWaitsReaders
	// hookInlineApply: when set, the committer applies each batch itself,
	// without the applier, with one token (the sequential pipeline, the
	// reference of the twin test), calling it before each apply.
	hookInlineApply
	// hookApply: a closed batch is about to be applied (applyBatch, on the
	// applier, or on the committer with hookInlineApply); blocking in it
	// holds the batch in the applier.
	hookApply
	// hookApplied: a batch has been applied, its fsync requested and not
	// awaited.
	hookApplied
	// hookSyncWait: the syncer is about to wait for a batch's fsync.
	hookSyncWait
	// hookSealed: the committer has sealed a call's events into the open
	// batch.
	hookSealed
	// hookWoken: the syncer has woken an acknowledged batch's appenders.
	hookWoken
	numHooks
)

// testHooks are functions called at the points above; nil entries and a
// nil *testHooks are skipped.
type testHooks [numHooks]func()

func (h *testHooks) call(point int) {
	if h != nil && h[point] != nil {
		h[point]()
	}
}
