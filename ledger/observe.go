package ledger

// Watch observers, each behind its own bounded queue. Guarantees, one per
// line:
//
//   - The syncer never waits for a Watch observer: handing a batch over is
//     a push onto the observer's queue under a short lock.
//   - Each observer gets batches in seq order from its own goroutine, one
//     call at a time.
//   - A full queue drops its oldest batch, never blocks: the observer is
//     told of every dropped range by Lagged (when it implements Lagger)
//     before the next batch it does get, and Stats.ObserverDropped counts
//     the dropped batches; so an observer sees every seq or learns it missed
//     it.
//   - unwatch discards what is queued, waits for a call in progress and
//     stops the goroutine; Close delivers everything queued, then stops
//     every goroutine.

import (
	"sync"

	"github.com/leaseledger/leaseledger/events"
)

// Record is a committed event as handed to observers: decoded envelope and
// the exact stored bytes.
type Record struct {
	Env events.Envelope
	Raw []byte
	// Payload, for BeforeAck only, is the draft payload given to Append or
	// AppendAcks (Env.Data encodes it), while that call still waits for its
	// acknowledgement; nil otherwise (also when the call returned
	// ErrUnacknowledged first: payload.go) and for Watch observers. Do not
	// modify it or keep what it points to.
	Payload events.Payload
	// owner is the call Payload comes from (payload.go); nil with it.
	owner *appendReq
}

// Observer receives every committed batch, after its fsync, in seq order.
// As Options.BeforeAck it runs on the committer's side of the pipeline and
// must not block for long (it delays acknowledgements); as a Watch observer
// it runs on its own goroutine behind a bounded queue (observe.go). It must
// not call Append, and must not modify the batch.
type Observer interface {
	Committed(batch []Record)
}

// ObserverQueueLen bounds the committed batches queued for one Watch
// observer. A batch holds at most DefaultMaxBatchEvents events (or
// Options.MaxBatchEvents), so an observer's backlog is bounded too.
const ObserverQueueLen = 256

// Lagger is implemented by Watch observers that want to know of batches
// dropped because they fell ObserverQueueLen batches behind. Lagged(from,
// to) says events from..to (inclusive) will not be delivered; it is called
// on the observer's goroutine, in order with Committed, before the batch
// that follows the dropped ones: every event committed while watched arrives
// by Committed or within a Lagged range, in seq order.
type Lagger interface {
	Lagged(from, to Seq)
}

// watcher is one Watch observer's queue and goroutine.
type watcher struct {
	o       Observer
	dropped func() // counts one dropped batch

	mu       sync.Mutex
	q        [][]Record // pending batches, oldest first; len <= ObserverQueueLen
	lagFrom  Seq        // dropped range before q[0]; 0 when none
	lagTo    Seq
	stopping bool // unwatch: discard q and stop
	draining bool // Close: deliver q, then stop
	wake     chan struct{}
	done     chan struct{}
}

func newWatcher(o Observer, dropped func()) *watcher {
	w := &watcher{o: o, dropped: dropped, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// push queues a non-empty batch, dropping the oldest when the queue is full.
// Records are freshly allocated per batch and never written after the ack,
// so the observer may keep them.
func (w *watcher) push(batch []Record) {
	w.mu.Lock()
	if w.stopping { // unwatched after the syncer took the list
		w.mu.Unlock()
		return
	}
	if len(w.q) == ObserverQueueLen {
		old := w.q[0]
		w.q[0] = nil
		w.q = w.q[1:]
		if w.lagFrom == 0 {
			w.lagFrom = Seq(old[0].Env.Seq)
		}
		w.lagTo = Seq(old[len(old)-1].Env.Seq)
		w.dropped()
	}
	w.q = append(w.q, batch)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		if w.stopping || (w.draining && len(w.q) == 0) {
			w.mu.Unlock()
			return
		}
		if len(w.q) == 0 {
			w.mu.Unlock()
			<-w.wake
			continue
		}
		batch := w.q[0]
		w.q[0] = nil
		w.q = w.q[1:]
		from, to := w.lagFrom, w.lagTo
		w.lagFrom, w.lagTo = 0, 0
		w.mu.Unlock()
		if from != 0 {
			if lg, ok := w.o.(Lagger); ok {
				lg.Lagged(from, to)
			}
		}
		w.o.Committed(batch)
	}
}

// stop ends the goroutine after the call in progress; with drain, after
// delivering everything queued. It returns when the goroutine has ended.
func (w *watcher) stop(drain bool) {
	w.mu.Lock()
	if drain {
		w.draining = true
	} else {
		w.stopping, w.q = true, nil
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
}

// Watch registers o to receive every batch committed from now on, after its
// appenders were acknowledged, in seq order, on a goroutine of its own
// behind a queue of ObserverQueueLen batches (see Lagger for a full queue).
// The returned function unregisters it and returns only when no call to o
// is in progress, so the observer's resources may be released right after;
// it must not be called from within an observer. Watching a closed ledger
// delivers nothing.
func (l *Ledger) Watch(o Observer) (unwatch func()) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.obsClosed {
		return func() {}
	}
	w := newWatcher(o, func() { l.obsDropped.Add(1) })
	next := append(append([]*watcher{}, l.watchers()...), w)
	l.observers.Store(&next)
	var once sync.Once
	return func() {
		once.Do(func() {
			l.obsMu.Lock()
			cur := l.watchers()
			next := make([]*watcher, 0, len(cur))
			for _, x := range cur {
				if x != w {
					next = append(next, x)
				}
			}
			l.observers.Store(&next)
			l.obsMu.Unlock()
			w.stop(false)
		})
	}
}

// closeObservers runs once the syncer has ended: it delivers what every
// observer has queued and stops its goroutine.
func (l *Ledger) closeObservers() {
	l.obsMu.Lock()
	l.obsClosed = true
	cur := l.watchers()
	empty := []*watcher{}
	l.observers.Store(&empty)
	l.obsMu.Unlock()
	for _, w := range cur {
		w.stop(true)
	}
}

// notifyObservers hands a committed batch to every Watch observer's queue.
func (l *Ledger) notifyObservers(batch []Record) {
	for _, w := range l.watchers() {
		w.push(batch)
	}
}

// watchers returns the current Watch observers (none on a read-only ledger,
// which has no committer).
func (l *Ledger) watchers() []*watcher {
	if p := l.observers.Load(); p != nil {
		return *p
	}
	return nil
}
