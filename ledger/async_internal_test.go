package ledger

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// holdObserver holds the syncer in BeforeAck until released.
type holdObserver struct {
	release, entered chan struct{}
	once             sync.Once
}

func (h *holdObserver) Committed([]Record) {
	h.once.Do(func() { close(h.entered) })
	<-h.release
}

// A failed async append is not lost silently: its wait returns the
// failure, and the failure is sticky, so the next append fails too.
func TestAppendAsyncFailureIsSticky(t *testing.T) {
	obs := &holdObserver{release: make(chan struct{}), entered: make(chan struct{})}
	l, err := Open(Options{Dir: t.TempDir(), BeforeAck: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	d := events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "r"}}
	first := make(chan error, 1)
	go func() { _, err := l.Append(ctx, d); first <- err }()
	<-obs.entered // the syncer is held: the next batch's sync is not yet checked
	wait, err := l.AppendAsync(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected storage failure")
	l.fail(injected)
	close(obs.release)
	if err := <-first; err != nil {
		t.Fatalf("the batch acknowledged before the failure: %v", err)
	}
	if _, err := wait(ctx); !errors.Is(err, ErrFailed) || !errors.Is(err, injected) {
		t.Fatalf("wait after the failure: %v", err)
	}
	if _, err := l.Append(ctx, d); !errors.Is(err, ErrFailed) {
		t.Fatalf("the next append: %v", err)
	}
}
