package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// Summarize summarises every activation, as audit.Summarize does for a
// full replay, at a cost bounded by the live state plus the activations it
// lists: the activations in memory are read under the read lock (which
// appends wait on); the retired ones stored as parts are counted from the
// verdict index written with them (storedStats, minus the stored records
// of the activations in memory, which count as they are in memory) and
// only the listed unconfirmed ones are read (u.<id>), from one view of the
// store opened after the memory read. Each activation counts once: as it
// was in memory at that read, or as stored then or later (an activation
// leaves memory only once its part is durable; an event after the memory
// read may change a stored one before the view opens, so the summary is
// not one instant's when appends run meanwhile).
func (p *Projection) Summarize(ctx context.Context, limit int) (audit.Summary, error) {
	if limit == 0 {
		limit = audit.DefaultUnconfirmed
	}
	var mem []audit.Unconfirmed // unconfirmed activations in memory, by id
	var ids []string
	sum := audit.Summary{Verdicts: map[string]int{projector.ResultConfirmed: 0, projector.ResultUnconfirmed: 0, projector.ResultUnverified: 0, projector.ResultNeverStarted: 0},
		Unconfirmed: []audit.Unconfirmed{}}
	err := p.View(func(s *projector.State) {
		sum.Events, sum.Anomalies, sum.Host, sum.Policy = s.Applied(), s.Anomalies(), s.Host(), s.Policy()
		ids = s.ActivationIDs()
		for _, id := range ids {
			verdict, reasons, omitted := s.Verdict(id)
			sum.Activations++
			sum.Verdicts[verdict]++
			if verdict != projector.ResultUnconfirmed {
				continue
			}
			_, closed := s.CloseReport(id)
			if !closed {
				sum.NotClosed++
			}
			if reasons == nil {
				reasons = []string{}
			}
			mem = append(mem, audit.Unconfirmed{Activation: id, Closed: closed, Reasons: reasons, ReasonsOmitted: omitted})
		}
	})
	if err != nil {
		return audit.Summary{}, err
	}
	unconfirmed := len(mem)
	var stored []audit.Unconfirmed // the first listed stored unconfirmed ones
	if !p.archive.off.Load() {
		v, err := p.l.ViewSnapshotParts(p.name)
		if err != nil {
			return audit.Summary{}, err
		}
		defer v.Close()
		load := func(_, key string) ([]byte, bool, error) { return v.Load(key) }
		var st storedStats
		if err := p.loadStats(load, &st); err != nil {
			return audit.Summary{}, err
		}
		inMem := make(map[string]bool, len(ids))
		for _, id := range ids {
			inMem[id] = true
			rec, _, ok, err := p.loadVerdict(load, id)
			if err != nil {
				return audit.Summary{}, err
			}
			if ok {
				st.add(rec, -1)
			}
		}
		sum.Activations += st.Activations
		for k, n := range st.Verdicts {
			sum.Verdicts[k] += n
		}
		sum.NotClosed += st.NotClosed
		unconfirmed += st.Verdicts[projector.ResultUnconfirmed]
		// The merged list needs at most limit stored entries.
		err = v.Scan(ctx, unconfirmedPrefix, func(key string, b []byte) error {
			id := key[len(unconfirmedPrefix):]
			if inMem[id] {
				return nil
			}
			if limit > 0 && len(stored) >= limit {
				return errListed
			}
			var r verdictRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("live: verdict index %s: %w: %v", key, projector.ErrSnapshotCorrupt, err)
			}
			if r.Reasons == nil {
				r.Reasons = []string{}
			}
			stored = append(stored, audit.Unconfirmed{Activation: id, Closed: r.Closed, Reasons: r.Reasons, ReasonsOmitted: r.Omitted})
			return nil
		})
		if err != nil && !errors.Is(err, errListed) {
			return audit.Summary{}, err
		}
	}
	for len(mem)+len(stored) > 0 && (limit < 0 || len(sum.Unconfirmed) < limit) {
		if len(stored) == 0 || (len(mem) > 0 && mem[0].Activation < stored[0].Activation) {
			sum.Unconfirmed, mem = append(sum.Unconfirmed, mem[0]), mem[1:]
		} else {
			sum.Unconfirmed, stored = append(sum.Unconfirmed, stored[0]), stored[1:]
		}
	}
	sum.Omitted = unconfirmed - len(sum.Unconfirmed)
	return sum, nil
}

// errListed stops the scan of the stored unconfirmed activations once
// Summarize has listed enough.
var errListed = errors.New("live: listed enough")
