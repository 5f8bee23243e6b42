package ledger

// Read-ahead scan: Pebble's iteration on one goroutine, the caller's
// callback on another. Guarantees and the tests that check them:
//
//   - ScanAhead makes exactly Scan's calls (seq, bytes, order) and returns
//     the same result, for whole scans, From/To ranges, indexed and
//     filtered queries, events larger than a chunk and an fn error at any
//     event: TestScanAheadTwin (pgregory.net/rapid).
//   - Bad queries and a closed ledger give Scan's typed errors:
//     TestScanAheadTwin, TestScanAheadClosed.
//   - fn's error, a panic in fn or ctx's cancellation ends the reader
//     before ScanAhead returns (no goroutine outlives it: the package's
//     TestMain runs goleak): TestScanAheadStops.
//   - A context that ends leaves Scan's result: nil when no event is left
//     to visit, the context's error after the same calls otherwise:
//     TestScanAheadContextTwin.
//   - Close waits for a ScanAhead in progress: TestScanAheadCloseWaits.
//   - No more than ScanAheadChunks chunks of ScanAheadChunkBytes exist per
//     call, none grows, and one event larger than a chunk is copied into
//     the single oversize buffer: TestScanAheadBounded.

import (
	"context"
	"errors"
)

const (
	// ScanAheadChunkBytes is the capacity of one read-ahead chunk: the
	// stored bytes of consecutive events, copied back to back. An event
	// larger than this (none is, below events.MaxEventBytes) is copied
	// into a buffer of its own instead.
	ScanAheadChunkBytes = 64 << 10
	// ScanAheadChunks is how many chunks one ScanAhead allocates at most:
	// the reader fills one while the caller's goroutine works through the
	// others, and waits for one to come back when all are out.
	ScanAheadChunks = 4
	// ScanAheadChunkEvents bounds the events in one chunk (each costs an
	// entry of a seq and a slice besides its bytes), so that a chunk of
	// small events stays bounded too.
	ScanAheadChunkEvents = 1024
)

// ScanAhead is Scan with read-ahead: it calls fn with the same seqs and
// bytes, in the same order, and returns what Scan would (fn's error
// unchanged, an *Error for the rest: bad queries, ErrClosed, ErrCorrupt,
// ctx's cancellation), but the Pebble iteration runs on a goroutine of its
// own, ahead of fn, copying each selected event into a chunk that is
// handed to the caller's goroutine, where fn runs. Reading and fn thus
// overlap: use it where a whole log or a long tail is fed to a projection.
//
// The bytes passed to fn are valid only during the call (their chunk is
// reused). Memory is bounded by ScanAheadChunks × ScanAheadChunkBytes of
// event bytes, plus ScanAheadChunks × ScanAheadChunkEvents entries, plus
// one event larger than a chunk when the log holds one. ScanAhead returns
// only once its reader has ended: fn's error or panic and ctx's
// cancellation stop the reader at its next event or its next wait for a
// chunk, and Close waits for it as for any read.
func (l *Ledger) ScanAhead(ctx context.Context, q Query, fn func(seq Seq, raw []byte) error) error {
	return l.scanAhead(ctx, q, fn, aheadConfig{chunkBytes: ScanAheadChunkBytes, chunks: ScanAheadChunks, chunkEvents: ScanAheadChunkEvents})
}

// aheadConfig holds a read-ahead's bounds (ScanAhead: the constants;
// tests: smaller ones) and, for tests, report: called by the reader as it
// ends with what it allocated.
type aheadConfig struct {
	chunkBytes, chunks, chunkEvents int
	report                          func(aheadStats)
}

// aheadStats is what one read-ahead's reader allocated.
type aheadStats struct {
	chunks    int // chunks made
	maxBufCap int // the largest capacity of a chunk's buffer handed over
	bigCopies int // events copied into the oversize buffer
}

// errAheadStopped ends the reader's iteration once the caller has
// returned; it never leaves ScanAhead.
var errAheadStopped = errors.New("ledger: read-ahead stopped")

// aheadChunk is a run of consecutive selected events.
type aheadChunk struct {
	buf []byte // the events' bytes back to back; never grows past its capacity
	evs []aheadEvent
	big []byte // the oversize buffer holding the last event, if any: returned after use
}

type aheadEvent struct {
	seq Seq
	raw []byte
}

// readAhead is one ScanAhead's reader and the channels it shares with the
// caller's goroutine. Chunks go round: free → reader → full → caller →
// free. As at most cfg.chunks exist and full holds as many, the reader
// never blocks sending; it blocks only for a free chunk or the oversize
// buffer, and then also on stop.
type readAhead struct {
	cfg  aheadConfig
	full chan *aheadChunk // filled chunks in seq order; closed when the reader returns
	free chan *aheadChunk // chunks fn is done with
	big  chan []byte      // the one oversize buffer, when no chunk holds it
	stop chan struct{}    // closed when ScanAhead returns
	err  error            // the iteration's result, read once full is closed

	cur       *aheadChunk // the chunk being filled
	made      int         // chunks allocated
	maxBufCap int
	bigCopies int
}

func (l *Ledger) scanAhead(ctx context.Context, q Query, fn func(seq Seq, raw []byte) error, cfg aheadConfig) error {
	if err := q.Validate(); err != nil {
		return err
	}
	end, err := l.beginRead("scan")
	if err != nil {
		return err
	}
	r := &readAhead{
		cfg:  cfg,
		full: make(chan *aheadChunk, cfg.chunks),
		free: make(chan *aheadChunk, cfg.chunks),
		big:  make(chan []byte, 1),
		stop: make(chan struct{}),
	}
	r.big <- nil
	go r.run(ctx, l, q)
	defer func() {
		close(r.stop)
		for range r.full { // until the reader has returned
		}
		end()
	}()
	return r.consume(ctx, fn)
}

// run is the reader: Scan's iteration copying each event into chunks.
func (r *readAhead) run(ctx context.Context, l *Ledger, q Query) {
	defer close(r.full)
	err := l.scan(ctx, q, r.copy)
	if r.cur != nil && len(r.cur.evs) > 0 {
		r.send() // the events before an error are handed to fn first, as by Scan
	}
	r.err = err
	if r.cfg.report != nil {
		r.cfg.report(aheadStats{chunks: r.made, maxBufCap: r.maxBufCap, bigCopies: r.bigCopies})
	}
}

// copy appends one event to the chunk being filled, handing it over first
// when the event does not fit.
func (r *readAhead) copy(seq Seq, raw []byte) error {
	select {
	case <-r.stop:
		return errAheadStopped
	default:
	}
	oversize := len(raw) > r.cfg.chunkBytes
	if c := r.cur; c != nil && (len(c.evs) == r.cfg.chunkEvents || !oversize && len(c.buf)+len(raw) > r.cfg.chunkBytes) {
		r.send()
	}
	if r.cur == nil {
		if err := r.take(); err != nil {
			return err
		}
	}
	c := r.cur
	if oversize {
		// The chunk holding the buffer is always handed over (below), so
		// the buffer comes back once fn has seen that chunk.
		var b []byte
		select {
		case b = <-r.big:
		case <-r.stop:
			return errAheadStopped
		}
		b = append(b[:0], raw...)
		c.evs = append(c.evs, aheadEvent{seq: seq, raw: b})
		c.big = b
		r.bigCopies++
		r.send()
		return nil
	}
	start := len(c.buf)
	c.buf = append(c.buf, raw...)
	c.evs = append(c.evs, aheadEvent{seq: seq, raw: c.buf[start:len(c.buf):len(c.buf)]})
	return nil
}

// take makes the chunk to fill: a free one, a new one while fewer than
// cfg.chunks exist, else the next one fn is done with.
func (r *readAhead) take() error {
	select {
	case r.cur = <-r.free:
		return nil
	default:
	}
	if r.made < r.cfg.chunks {
		r.cur = &aheadChunk{buf: make([]byte, 0, r.cfg.chunkBytes)}
		r.made++
		return nil
	}
	select {
	case r.cur = <-r.free:
		return nil
	case <-r.stop:
		return errAheadStopped
	}
}

// send hands the chunk being filled to the caller's goroutine; it never
// blocks (full has room for every chunk).
func (r *readAhead) send() {
	r.maxBufCap = max(r.maxBufCap, cap(r.cur.buf))
	r.full <- r.cur
	r.cur = nil
}

// consume runs fn over the chunks in order, returning each after use. It
// checks ctx before each event, as Scan does, and not while it waits for a
// chunk: the reader checks ctx before each event too and then ends (every
// chunk is in full or free meanwhile, so it never waits for one), and so
// a context that ends after the last event leaves Scan's result, nil,
// unchanged (TestScanAheadContextTwin).
func (r *readAhead) consume(ctx context.Context, fn func(seq Seq, raw []byte) error) error {
	for {
		c, ok := <-r.full
		if !ok {
			return r.err
		}
		for _, ev := range c.evs {
			if err := ctx.Err(); err != nil {
				return &Error{Op: "scan", Err: err}
			}
			if err := fn(ev.seq, ev.raw); err != nil {
				return err
			}
		}
		if c.big != nil {
			r.big <- c.big
			c.big = nil
		}
		c.buf, c.evs = c.buf[:0], c.evs[:0]
		r.free <- c
	}
}
