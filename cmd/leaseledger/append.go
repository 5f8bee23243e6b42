package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
)

// maxLineBytes bounds one input line: the largest valid event plus slack
// for whitespace. A longer line is refused, not truncated.
const maxLineBytes = events.MaxEventBytes + 1024

func newAppendCmd(a *app) *cobra.Command {
	var (
		concurrency, batch int
		natsURL            string
		creds              natsCreds
		retry              busclient.RetryPolicy
	)
	cmd := &cobra.Command{
		Use:   "append",
		Short: "Append JSON Lines of events from stdin; print '<seq> <ulid>' per acknowledged event",
		Long: `append reads events in the input form, one JSON object per line:

  {"kind":"lease.terminated","activation":"act-1","data":{"reason":"revoked"}}

(see examples/events.jsonl and docs/events.md), appends them with
--concurrency appenders and prints "<seq> <ulid>" for each event as soon as
it is durable (fsynced). A malformed line, or one of a kind only the
ledger writes (host.bound: serve --host-id binds the host), is reported on
stderr with its line number and skipped; the others are still appended,
and the exit status is 1. With --nats the events go to a running 'serve'
(as its writer user) instead of a data directory; each append call carries an idempotency key,
and a call whose outcome is in doubt (no answer within --request-timeout, a
lost connection, serve restarting) is sent again under the same key, with
backoff, until --retry-deadline or --retries run out: serve answers a retry
of what it already wrote with the original seqs, so a stalled or restarted
serve delays the lines, never duplicates them. A failed append is reported
as "not appended" only when nothing of it was written; when that cannot be
known after the retries (or a failed sync) it is reported "in doubt": read
the log to find out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if concurrency < 1 || batch < 1 || batch > ledger.MaxAppendEvents {
				return fmt.Errorf("--concurrency must be ≥ 1 and --batch in [1, %d]", ledger.MaxAppendEvents)
			}
			ctx := cmd.Context()
			var sink appendSink
			if natsURL != "" {
				if retry.RequestTimeout <= 0 || retry.Deadline <= 0 || retry.MaxAttempts < 1 {
					return fmt.Errorf("--request-timeout and --retry-deadline must be > 0 and --retries ≥ 1")
				}
				// Reconnect for as long as an append may be retried: a
				// restarted serve is found again on the same URL.
				nc, err := creds.connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(appendReconnectWait))
				if err != nil {
					return err
				}
				defer nc.Close()
				sink = natsSink{creds.client(nc).WithRetry(retry)}
			} else {
				l, err := ledger.Open(ledger.Options{Dir: a.dataDir, Logger: a.logger})
				if err != nil {
					return err
				}
				defer l.Close()
				sink = ledgerSink{l}
			}
			return appendStream(ctx, a, sink, concurrency, batch)
		},
	}
	f := cmd.Flags()
	f.IntVar(&concurrency, "concurrency", 1, "number of concurrent appenders")
	f.IntVar(&batch, "batch", 1, "events per Append call (consecutive valid lines)")
	f.StringVar(&natsURL, "nats", "", "append through a running 'serve' at this NATS URL instead of --data-dir")
	f.DurationVar(&retry.RequestTimeout, "request-timeout", busclient.DefaultRequestTimeout, "with --nats: wait this long for one attempt's answer before retrying it")
	f.DurationVar(&retry.Deadline, "retry-deadline", busclient.DefaultAppendDeadline, "with --nats: give up retrying one append call after this long (then it is in doubt)")
	f.IntVar(&retry.MaxAttempts, "retries", busclient.DefaultAppendAttempts, "with --nats: at most this many attempts per append call")
	creds.flags(f)
	return cmd
}

// appendSink is where appended events go: a data directory or a bus.
type appendSink interface {
	append(ctx context.Context, lines [][]byte, drafts []events.Draft) ([]ack, error)
}

// ack is what a sink acknowledged for one durable event.
type ack struct {
	seq events.Seq
	id  ulid.ULID
}

type ledgerSink struct{ l *ledger.Ledger }

func (s ledgerSink) append(ctx context.Context, _ [][]byte, drafts []events.Draft) ([]ack, error) {
	acks, err := s.l.AppendAcks(ctx, drafts...)
	out := make([]ack, len(acks))
	for i, a := range acks {
		out[i] = ack{a.Seq, a.ID}
	}
	return out, err
}

type natsSink struct{ c *busclient.Client }

func (s natsSink) append(ctx context.Context, lines [][]byte, _ []events.Draft) ([]ack, error) {
	var body []byte
	for _, l := range lines {
		body = append(append(body, l...), '\n')
	}
	acks, err := s.c.Append(ctx, body)
	out := make([]ack, len(acks))
	for i, a := range acks {
		out[i] = ack{a.Seq, a.ID}
	}
	return out, err
}

// inDoubt reports whether a failed append may nevertheless have been
// written: the ledger's or the bus's "in doubt" errors.
func inDoubt(err error) bool {
	return errors.Is(err, busclient.ErrInDoubt) || errors.Is(err, ledger.ErrUnacknowledged) || errors.Is(err, ledger.ErrFailed)
}

type appendJob struct {
	firstLine int
	lines     [][]byte
	drafts    []events.Draft
}

func appendStream(parent context.Context, a *app, sink appendSink, concurrency, batch int) error {
	// Reading stops at the first failed append or at an interrupt, but the
	// appends already taken in run to their end on a context of their own:
	// an append cut off mid-way may or may not be written, and its ack line
	// would be lost. Every acknowledged event gets its line.
	readCtx, stopReading := context.WithCancel(parent)
	defer stopReading()
	appendCtx := context.WithoutCancel(parent)
	jobs := make(chan appendJob, concurrency)
	var (
		outMu    sync.Mutex
		refused  int
		wg       sync.WaitGroup
		failures []error
		writeErr error
	)
	out := bufio.NewWriter(a.stdout)
	for range concurrency {
		wg.Go(func() {
			for job := range jobs {
				acks, err := sink.append(appendCtx, job.lines, job.drafts)
				outMu.Lock()
				if err != nil {
					what := "not appended"
					if inDoubt(err) {
						what = "in doubt (they may or may not be in the log: read it to find out)"
					}
					failures = append(failures, fmt.Errorf("lines %d–%d %s: %w", job.firstLine, job.firstLine+len(job.lines)-1, what, err))
					stopReading()
				}
				for _, a := range acks {
					fmt.Fprintf(out, "%d %s\n", a.seq, a.id)
				}
				// Flushed as soon as acknowledged: a reader of our stdout may
				// treat every line it sees as durable.
				if err := out.Flush(); err != nil && writeErr == nil {
					writeErr = fmt.Errorf("write acknowledgements: %w", err)
					stopReading()
				}
				outMu.Unlock()
			}
		})
	}
	r := bufio.NewReaderSize(a.stdin, 64<<10)
	var pending appendJob
	send := func() bool {
		if len(pending.drafts) == 0 {
			return true
		}
		select {
		case jobs <- pending:
		case <-readCtx.Done():
			return false
		}
		pending = appendJob{}
		return true
	}
	var readErr error
	for lineNo := 1; readCtx.Err() == nil; lineNo++ {
		line, err := readLine(r, maxLineBytes)
		if errors.Is(err, io.EOF) && line == nil {
			break
		}
		if errors.Is(err, errLineTooLong) {
			fmt.Fprintf(a.stderr, "leaseledger: line %d: %v (limit %d bytes)\n", lineNo, err, maxLineBytes)
			refused++
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			readErr = fmt.Errorf("read stdin: %w", err)
			break
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		d, perr := events.ParseInput(line)
		if perr == nil {
			perr = ledger.Appendable(d.Payload.Kind()) // host.bound: only serve --host-id writes it
		}
		if perr != nil {
			fmt.Fprintf(a.stderr, "leaseledger: line %d: %v\n", lineNo, perr)
			refused++
			continue
		}
		if len(pending.drafts) == 0 {
			pending.firstLine = lineNo
		}
		pending.lines = append(pending.lines, line)
		pending.drafts = append(pending.drafts, d)
		if len(pending.drafts) == batch && !send() {
			break
		}
	}
	send()
	close(jobs)
	wg.Wait()
	for _, f := range failures {
		fmt.Fprintln(a.stderr, "leaseledger:", f)
	}
	switch {
	case readErr != nil:
		return readErr
	case writeErr != nil:
		return writeErr
	case len(failures) > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d append call(s) failed (listed above); reading stopped at the first", len(failures))}
	case parent.Err() != nil:
		return fmt.Errorf("interrupted; every acknowledged event was printed: %w", parent.Err())
	case refused > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d line(s) refused; all others appended", refused)}
	}
	return nil
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline. A line longer than
// limit is consumed to its end and reported as errLineTooLong, so one bad
// line never costs more than limit bytes of memory.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > limit+1 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return []byte{}, errLineTooLong
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil, io.EOF
		}
		return line, err
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// natsCreds are the connection flags shared by commands that talk to serve.
// host is the serve's --host-id in a fleet: its requests and
// subscriptions use that host's subjects (busclient.HostSubject).
type natsCreds struct{ user, password, host string }

func (c *natsCreds) flags(f flagSet) {
	f.StringVar(&c.user, "user", "", "NATS user name")
	f.StringVar(&c.password, "password", "", "NATS password (env LEASELEDGER_NATS_PASSWORD)")
	f.StringVar(&c.host, "host-id", "", "the --host-id of the 'serve' to talk to, in a fleet (its subjects are leaseledger.hosts.<id>.…)")
}

// client is a bus client on nc in the host's space.
func (c *natsCreds) client(nc *nats.Conn) *busclient.Client {
	return busclient.NewClient(nc).WithHost(c.host)
}

// appendReconnectWait is the pause between reconnection attempts of
// `append --nats` (which reconnects without limit while it retries) and
// `tail --nats` (which reconnects for as long as it runs); both reconnect
// only to the URL they were given (busclient.ConnectOptions).
const appendReconnectWait = 250 * time.Millisecond

func (c *natsCreds) connect(url string, extra ...nats.Option) (*nats.Conn, error) {
	if c.host != "" && !events.ValidID(c.host) {
		return nil, fmt.Errorf("--host-id %q: want %s", c.host, events.IDRule)
	}
	opts := append([]nats.Option{nats.Name("leaseledger-cli")}, extra...)
	pw := c.password
	if pw == "" {
		pw = getenv("LEASELEDGER_NATS_PASSWORD")
	}
	opts = append(opts, busclient.UserOptions(c.user, pw)...)
	nc, err := busclient.Connect(url, opts...) // stays with url (busclient.ConnectOptions)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, nil
}
