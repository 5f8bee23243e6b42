// Package ledgermetrics owns the Prometheus view of a ledger: a Collector
// that reads ledger.Stats at scrape time, so that package ledger itself does
// not link Prometheus and metrics add nothing to the append path.
package ledgermetrics

import (
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a ledger's Stats as Prometheus metrics. It reads Stats
// at scrape time, so it adds nothing to the append path.
type Collector struct {
	l                                                                  *ledger.Ledger
	head, events, commits, commitSeconds, queued, failed, corruptReads *prometheus.Desc
}

// NewCollector returns a prometheus.Collector for l.
func NewCollector(l *ledger.Ledger) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("leaseledger_"+name, help, nil, nil)
	}
	return &Collector{l: l,
		head:          d("head_seq", "Seq of the last durable event."),
		events:        d("appended_events_total", "Events durably appended since the ledger was opened."),
		commits:       d("commits_total", "Pebble Sync commits (group commits) since the ledger was opened."),
		commitSeconds: d("commit_seconds_total", "Time from applying a batch to observing its fsync, summed over commits."),
		queued:        d("append_queue_length", "Append calls waiting for the committer."),
		failed:        d("failed", "1 after a sticky storage failure: appends are refused until reopened."),
		corruptReads:  d("corrupt_reads_total", "Reads that met damaged storage and failed with ErrCorrupt (run verify)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.head, c.events, c.commits, c.commitSeconds, c.queued, c.failed, c.corruptReads} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	failed := 0.0
	if s.Failed {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.head, prometheus.GaugeValue, float64(s.Head.Seq))
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(s.Events))
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(s.Commits))
	ch <- prometheus.MustNewConstMetric(c.commitSeconds, prometheus.CounterValue, float64(s.CommitNanos)/1e9)
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(s.Queued))
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(c.corruptReads, prometheus.CounterValue, float64(s.CorruptReads))
}
