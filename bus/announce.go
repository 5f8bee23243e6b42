package bus

import (
	"encoding/json"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
)

// Host announcements (busclient/announce.go): a clustered bus announces
// its host and durable head on HostSubject(HostID, AnnounceSubject), so a
// collector with host discovery finds it without being told.
//
// Guarantees (tests in announce_test.go):
//   - A clustered bus announces at its start and every AnnounceInterval
//     until it closes; its announcing goroutine ends before Close returns
//     (TestHostAnnounces).
//   - Only the bus's own publisher may publish its announce subject: its
//     clients (anonymous or named) may not, nor a client of another host of
//     the cluster, whose permissions stay in that host's space
//     (TestAnnounceOnlyByItsHost).

// DefaultAnnounceInterval is how often a clustered host announces itself
// (Options.AnnounceInterval): the collector's default poll interval, so a
// discovering collector finds a new host within about one.
const DefaultAnnounceInterval = time.Second

// startAnnouncing starts the announcing goroutine of a clustered bus
// (Close waits for it).
func (b *Bus) startAnnouncing() {
	if b.opts.HostID == "" || !b.opts.Cluster.enabled() || b.opts.AnnounceInterval < 0 || b.l == nil {
		return
	}
	every := b.opts.AnnounceInterval
	if every == 0 {
		every = DefaultAnnounceInterval
	}
	subject := busclient.HostSubject(b.opts.HostID, busclient.AnnounceSubject)
	b.announcer.Add(1)
	go func() {
		defer b.announcer.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			data, _ := json.Marshal(busclient.Announcement{Host: b.opts.HostID, Head: b.l.Head().Seq}) // never fails: a string and a number
			if err := b.nc.Publish(subject, data); err != nil {
				b.opts.Logger.Warn("bus: announcement not published", "subject", subject, "err", err)
			}
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
