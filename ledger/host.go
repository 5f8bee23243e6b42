package ledger

// Host binding: which host's chain a ledger holds (events.HostBound).
// Guarantees, one per line (tests in host_test.go):
//
//   - BindHost on an empty ledger appends host.bound as seq 1, the chain's
//     genesis (TestBindHostEmpty).
//   - BindHost naming the host already bound returns the seq of that
//     host.bound and writes nothing, also after a reopen (TestBindHostAgain).
//   - BindHost naming another host fails with ErrHostMismatch, naming both
//     hosts, and writes nothing (TestBindHostMismatch).
//   - On a non-empty ledger with no host.bound, BindHost appends it at
//     head+1 (TestBindHostLate).
//   - BindHost finds the binding through the kind index (k/host.bound/),
//     never by scanning the log (TestBindHostUsesKindIndex).
//   - Only BindHost writes host.bound: Append, AppendAcks, AppendAsync,
//     AppendPreparedAsync and AppendIdempotent refuse a call holding one
//     (anywhere in it) with ErrReservedKind and write nothing of the call
//     (TestAppendRefusesHostBound).
//   - Import still stores host.bound verbatim: a mirror holds the host's
//     chain as it is (TestImportKeepsHostBound).
//   - Outside this package the same rule holds: the bus's raw append answers
//     bad-request (bus TestAppendHostBoundRefused) and `leaseledger
//     append` refuses the line (TestAppendRefusesHostBoundLine).

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// ErrHostMismatch is returned by BindHost when the ledger's chain is bound
// to another host: its ledger belongs to another host of the fleet.
var ErrHostMismatch = errors.New("ledger: the chain is bound to another host")

// BindHost binds the ledger's chain to host (an events.ValidID) and returns
// the seq of the host.bound event naming it: appended as seq 1 on an empty
// ledger, or at head+1 on a ledger written before its host was named;
// already there, with nothing written, when the latest host.bound names
// host. A latest host.bound naming another host yields ErrHostMismatch. It
// is meant to be called once at start, before appends begin.
func (l *Ledger) BindHost(ctx context.Context, host string) (events.Seq, error) {
	if !events.ValidID(host) {
		return 0, &Error{Op: "bind host", Err: fmt.Errorf("%w: host %q: want %s", events.ErrInvalid, host, events.IDRule)}
	}
	l.bindMu.Lock() // two concurrent binds must not both append
	defer l.bindMu.Unlock()
	seq, bound, err := l.BoundHost()
	if err != nil {
		return 0, err
	}
	switch {
	case seq == 0:
	case bound == host:
		return seq, nil
	default:
		return 0, &Error{Op: "bind host", Seq: seq, Err: fmt.Errorf("%w: bound to %q at seq %d, not %q", ErrHostMismatch, bound, seq, host)}
	}
	p, err := events.Prepare(events.Draft{Payload: &events.HostBound{Host: host}})
	if err != nil {
		return 0, &Error{Op: "bind host", Err: err}
	}
	// bind: the one path past appendable (commit.go's enqueue).
	acks, err := l.await(ctx, &appendReq{prepared: []events.Prepared{p}, bind: true, done: make(chan struct{})})
	if err != nil {
		return 0, err
	}
	return acks[0].Seq, nil
}

// Appendable returns nil when events of kind k may be appended, and an
// error wrapping ErrReservedKind when the ledger writes that kind only
// itself (events.SystemOnly: host.bound, which only BindHost writes). The
// append entry points refuse such a call; input readers may ask first to
// refuse one line instead of a whole call.
func Appendable(k events.Kind) error {
	if events.SystemOnly(k) {
		return fmt.Errorf("%w: %s (only BindHost writes it: serve --host-id binds the host)", ErrReservedKind, k)
	}
	return nil
}

// appendable is Appendable over an append call's events, naming the first
// refused one as Append names an invalid draft.
func appendable(prepared []events.Prepared) error {
	for i := range prepared {
		if err := Appendable(prepared[i].Kind); err != nil {
			return fmt.Errorf("event %d of %d: %w", i, len(prepared), err)
		}
	}
	return nil
}

// BoundHost returns the seq and host of the latest durable host.bound
// event, read from the kind index; seq 0 and "" when there is none.
func (l *Ledger) BoundHost() (events.Seq, string, error) {
	end, err := l.beginRead("bind host")
	if err != nil {
		return 0, "", err
	}
	head := l.Head().Seq
	prefix := keys.IndexPrefix(keys.PrefixKind, string(events.KindHostBound))
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.Index(keys.PrefixKind, string(events.KindHostBound), head+1)})
	if err != nil {
		end()
		return 0, "", l.readErr("bind host", 0, 0, err)
	}
	var seq events.Seq
	if it.Last() {
		seq, _ = keys.SeqOf(it.Key())
	}
	ierr := it.Error()
	it.Close()
	end()
	if ierr != nil {
		return 0, "", l.readErr("bind host", 0, 0, fmt.Errorf("read the kind index: %w", ierr))
	}
	if seq == 0 {
		return 0, "", nil
	}
	env, err := l.Get(seq)
	if err != nil {
		return 0, "", err
	}
	p, err := env.Payload()
	hb, ok := p.(*events.HostBound)
	if err != nil || !ok {
		return 0, "", &Error{Op: "bind host", Seq: seq, Err: fmt.Errorf("%w: the kind index names seq %d as host.bound: %v", ErrCorrupt, seq, err)}
	}
	return seq, hb.Host, nil
}
