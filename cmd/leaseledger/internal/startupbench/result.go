package startupbench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goal is the ratio serve/floor of the median time to listening the open
// speed issue asks for at every size.
const Goal = 1.5

// Result is what Run measured.
type Result struct {
	Rounds int          `json:"rounds"`
	Warmup int          `json:"warmup"`
	Sizes  []SizeResult `json:"sizes"` // smallest first
}

// SizeResult is one ledger's figures.
type SizeResult struct {
	Events int    `json:"events"`
	Dir    string `json:"dir"`
	Bytes  int64  `json:"bytes"` // the ledger's files
	Serve  Side   `json:"serve"`
	Floor  Side   `json:"floor"`
	// SnapshotSeq and Replayed are what the last measured serve said: the
	// seq of the snapshot it started from and the events it replayed.
	SnapshotSeq uint64 `json:"snapshot_seq"`
	Replayed    uint64 `json:"replayed"`
}

// Side is one side's starts on one ledger.
type Side struct {
	Ready   []time.Duration `json:"ready_ns"`       // time to listening, per start
	PeakRSS []int64         `json:"peak_rss_bytes"` // per start (0: unknown)
}

// ReadyP50 is the median time to listening.
func (s Side) ReadyP50() time.Duration { return median(s.Ready) }

// RSSP50 is the median peak resident set in bytes.
func (s Side) RSSP50() int64 { return median(s.PeakRSS) }

// Ratio is serve's median time to listening over the floor's.
func (s SizeResult) Ratio() float64 { return ratio(s.Serve.ReadyP50(), s.Floor.ReadyP50()) }

// Ratio is one named ratio.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Ratios are the figures the goal is read from: serve/floor per size, then,
// with two sizes or more, the largest ledger's over the smallest's for
// serve's and the floor's time to listening and serve's peak resident set.
func (r *Result) Ratios() []Ratio {
	var out []Ratio
	for _, s := range r.Sizes {
		out = append(out, Ratio{fmt.Sprintf("serve / floor at %d events", s.Events), s.Ratio()})
	}
	if len(r.Sizes) < 2 {
		return out
	}
	small, large := r.Sizes[0], r.Sizes[len(r.Sizes)-1]
	span := fmt.Sprintf("%d / %d events", large.Events, small.Events)
	return append(out,
		Ratio{"serve start-up, " + span, ratio(large.Serve.ReadyP50(), small.Serve.ReadyP50())},
		Ratio{"floor start-up, " + span, ratio(large.Floor.ReadyP50(), small.Floor.ReadyP50())},
		Ratio{"serve peak RSS, " + span, ratio(large.Serve.RSSP50(), small.Serve.RSSP50())},
	)
}

// String is the table and the ratios.
func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "time to listening (p50 of %d runs after %d warm-up) and peak RSS (p50)\n", r.Rounds, r.Warmup)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "events\tledger MiB\tserve ms\tfloor ms\tserve/floor\tserve RSS MiB\tfloor RSS MiB\tserve replayed")
	for _, s := range r.Sizes {
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%d (snapshot at %d)\n", s.Events, mib(s.Bytes),
			ms(s.Serve.ReadyP50()), ms(s.Floor.ReadyP50()), s.Ratio(), mib(s.Serve.RSSP50()), mib(s.Floor.RSSP50()), s.Replayed, s.SnapshotSeq)
	}
	_ = tw.Flush()
	for _, q := range r.Ratios() {
		goal := ""
		if strings.HasPrefix(q.Name, "serve / floor") {
			goal = fmt.Sprintf("  (goal <= %.1f)", Goal)
		}
		fmt.Fprintf(&b, "%s: %.2f%s\n", q.Name, q.Value, goal)
	}
	return strings.TrimRight(b.String(), "\n")
}

func median[T time.Duration | int64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ratio[T time.Duration | int64](a, b T) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(n int64) float64        { return float64(n) / (1 << 20) }
