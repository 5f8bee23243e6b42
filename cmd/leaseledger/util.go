package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
)

type flagSet = *pflag.FlagSet

func getenv(k string) string { return os.Getenv(k) }

// progress prints "<label> done/total (pct%)" to w: in place on a
// terminal, otherwise at most once every interval, so logs stay readable.
type progress struct {
	w        io.Writer
	label    string
	tty      bool
	interval time.Duration
	last     time.Time
	printed  bool
}

func newProgress(w io.Writer, label string) *progress {
	p := &progress{w: w, label: label, interval: 2 * time.Second}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 100*time.Millisecond
		}
	}
	return p
}

func (p *progress) update(done, total uint64) {
	now := time.Now()
	if done < total && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	const width = 30
	filled := int(pct / 100 * width)
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if i < filled {
			bar[i] = '#'
		}
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%s [%s] %d/%d (%.1f%%)", p.label, bar, done, total, pct)
	} else {
		fmt.Fprintf(p.w, "%s [%s] %d/%d (%.1f%%)\n", p.label, bar, done, total, pct)
	}
	p.printed = true
}

func (p *progress) finish() {
	if p.tty && p.printed {
		fmt.Fprintln(p.w)
	}
}
