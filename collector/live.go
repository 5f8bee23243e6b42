package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
)

// The live path. Live messages are hints, confirmed by the host's replay
// before anything they carry is stored; one that is not the host's is
// counted and ignored, never a refusal (TestForgedLiveMessageDoesNotRefuse,
// TestForgedLiveEventNotImported, TestForgedLiveFromHubClient).

// MinLiveReplayInterval spaces the replay requests the live path makes
// for one host (a run's confirmation, a contradicted message's check): at
// most one per interval (500/s), a small part of the request rate a host's
// bus grants the peer class the collector calls it in (the writer's,
// bus.DefaultWriterRequestRate), however busy the host or however many
// forged messages arrive. The live messages that arrive meanwhile join the
// next run (up to ImportBatchEvents), so the spacing costs latency, not
// throughput.
const MinLiveReplayInterval = 2 * time.Millisecond

// errLiveRejected: live events were found not to be the host's: its own
// replay says otherwise. They are counted (HostStatus.LiveRejected) and
// dropped, never a refusal.
var errLiveRejected = errors.New("collector: live events not confirmed by the host")

// live handles a batch of live messages. They are hints, not the host
// speaking: anyone who may publish on the host's subjects could have sent
// them. A run of new events is stored only once the host's replay
// confirms its last event (sync); a message that differs from the mirror
// is judged by the host's replay of its seq (contradicted). A hole before
// a message is filled by replay.
func (hm *hostMirror) live(ctx context.Context, batch []*nats.Msg) error {
	var run [][]byte
	next := hm.l.Head().Seq + 1
	for _, m := range batch {
		seq, ok := msgSeq(m)
		if !ok {
			hm.rejectLive(1, "malformed")
			continue
		}
		if seq > next {
			if err := hm.sync(ctx, run, seq-1); err != nil {
				return err
			}
			run = nil
			if next = hm.l.Head().Seq + 1; seq > next {
				continue // past what the host's replay holds: the next live event or poll tells
			}
		}
		switch first := next - events.Seq(len(run)); {
		case seq < first:
			stored, err := hm.l.GetRaw(seq)
			if err != nil {
				return fmt.Errorf("read mirrored seq %d: %w", seq, err)
			}
			if !bytes.Equal(stored, m.Data) {
				return hm.contradicted(ctx, seq, stored)
			}
		case seq < next:
			if !bytes.Equal(run[seq-first], m.Data) {
				// Two messages disagree on a seq the mirror lacks: trust
				// neither and drop the batch; the hole it leaves is filled
				// by replay (the next live event or poll finds it).
				hm.rejectLive(1, "two live events at one seq")
				return nil
			}
		default:
			run = append(run, m.Data)
			next++
		}
	}
	if len(run) > 0 {
		if err := hm.sync(ctx, run, next-1); err != nil {
			return err
		}
	}
	hm.settle()
	return nil
}

// sync brings the mirror to seq to by replay (one request when run
// reaches to), with run — live events for the seqs right after the
// mirror's head — confirmed by the host's event at its last seq and
// imported; when the host's replay does not confirm run, the replay
// fills from the mirror's head instead and the events of run it did not
// bring are counted in LiveRejected. Paced by MinLiveReplayInterval.
func (hm *hostMirror) sync(ctx context.Context, run [][]byte, to events.Seq) error {
	if !hm.pace(ctx) {
		return ctx.Err()
	}
	err := hm.fill(ctx, to, run)
	if errors.Is(err, errLiveRejected) {
		err = hm.fill(ctx, to, nil)
		n := 0
		for _, raw := range run {
			seq, _ := events.PeekSeq(raw) // msgSeq read it
			if stored, gerr := hm.l.GetRaw(seq); gerr != nil || !bytes.Equal(stored, raw) {
				n++
			}
		}
		hm.rejectLive(n, "not confirmed by the host's replay")
	}
	return err
}

// contradicted judges a live message that differs from the mirrored event
// stored at seq by the host's replay of seq: another event there means
// the host forked (refused); the stored one means the message was not the
// host's (counted in LiveRejected, ignored). Either way the rest of the
// batch is dropped; the hole it leaves is filled by replay (the next live
// event or poll finds it).
func (hm *hostMirror) contradicted(ctx context.Context, seq events.Seq, stored []byte) error {
	if !hm.pace(ctx) {
		return ctx.Err()
	}
	var replayed []byte
	err := hm.peerOrBare(func(c *busclient.Client) (answered bool, err error) {
		_, err = c.Replay(ctx, seq, seq, busclient.TailFilter{}, func(s events.Seq, raw []byte) error {
			answered = true
			if s == seq {
				replayed = raw
			}
			return nil
		})
		return answered, err
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		hm.setState(StateUnreachable, err) // unjudged: the message is dropped
		return nil
	case replayed != nil && !bytes.Equal(replayed, stored):
		return hm.refuseOffered(seq, stored, replayed)
	}
	hm.rejectLive(1, fmt.Sprintf("differs from mirrored seq %d, which the host's replay confirms", seq))
	return nil
}

// paceWait waits until MinLiveReplayInterval has passed since the last
// paced request; false when ctx ended first.
func (hm *hostMirror) paceWait(ctx context.Context) bool {
	d := MinLiveReplayInterval - time.Since(hm.lastAsked)
	return d <= 0 || sleep(ctx, d)
}

// pace is paceWait, then counts a paced request as made now.
func (hm *hostMirror) pace(ctx context.Context) bool {
	if !hm.paceWait(ctx) {
		return false
	}
	hm.lastAsked = time.Now()
	return true
}

// rejectLive counts n live messages found not to be the host's.
func (hm *hostMirror) rejectLive(n int, why string) {
	if n == 0 {
		return
	}
	hm.mu.Lock()
	hm.st.LiveRejected += uint64(n)
	hm.mu.Unlock()
	hm.opts.Logger.Warn("collector: live messages rejected", "host", hm.host, "count", n, "why", why)
}

func msgSeq(m *nats.Msg) (events.Seq, bool) {
	h, err := strconv.ParseUint(m.Header.Get(busclient.HeaderSeq), 10, 64)
	if err != nil {
		return 0, false
	}
	body, err := events.PeekSeq(m.Data)
	if err != nil || uint64(body) != h {
		return 0, false
	}
	return body, true
}
