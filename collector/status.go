package collector

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// States of a host's mirroring.
const (
	// StateLive: the mirror holds everything the host last reported.
	StateLive = "live"
	// StateCatchingUp: the mirror is behind the host's head and filling by
	// replay (at start, after a hole, after the host returned).
	StateCatchingUp = "catching_up"
	// StateUnreachable: the host's API does not answer (down, partitioned,
	// or its replies time out); mirroring resumes when it answers.
	StateUnreachable = "unreachable"
	// StateRefused: the host's chain was refused (HostStatus.Finding).
	StateRefused = "refused"
)

// StatusSubject is the fleet-level read-only service (in the bare space
// of the collector's fleet bus, see 'collect') that answers the Status as
// JSON, as Handler's /status does.
const StatusSubject = "leaseledger.api.fleet.status"

// HostStatus is one host's mirroring, as /status shows it.
type HostStatus struct {
	// Head is the mirror's durable head seq.
	Head events.Seq `json:"head"`
	// HostHead is the highest head seq the host last reported (its head
	// API or a live event).
	HostHead events.Seq `json:"host_head"`
	// Lag is HostHead - Head (0 when the mirror is not behind).
	Lag uint64 `json:"lag"`
	// State is one of StateLive, StateCatchingUp, StateUnreachable,
	// StateRefused.
	State string `json:"state"`
	// Finding is why the host is refused (StateRefused only).
	Finding *Finding `json:"finding,omitempty"`
	// Imported counts events stored in the mirror since Start.
	Imported uint64 `json:"imported"`
	// Dropped counts live messages NATS dropped because the host's buffer
	// was full (their events came by replay instead).
	Dropped uint64 `json:"dropped"`
	// LiveRejected counts live messages found not to be the host's (its
	// replay says otherwise, or they are malformed): ignored, never a
	// refusal.
	LiveRejected uint64 `json:"live_rejected,omitempty"`
	// CheckpointsVerified counts the host's signed checkpoints found equal
	// to the mirror (Options.Verifiers); VerifiedSize is the largest size
	// among them.
	CheckpointsVerified uint64     `json:"checkpoints_verified,omitempty"`
	VerifiedSize        events.Seq `json:"verified_size,omitempty"`
	// CheckpointSize is the size of the latest checkpoint of the host
	// found equal to the mirror (its signature verified when the host has
	// a verifier): the one handed to Options.OnCheckpoint.
	CheckpointSize events.Seq `json:"checkpoint_size,omitempty"`
	// CheckpointsRejected counts checkpoints ignored: whose signature did
	// not verify or that do not parse, and (of a host without a verifier)
	// those the mirror contradicts; CheckpointsDropped those dropped
	// unchecked past MaxPendingCheckpoints.
	CheckpointsRejected uint64 `json:"checkpoints_rejected,omitempty"`
	CheckpointsDropped  uint64 `json:"checkpoints_dropped,omitempty"`
	// LastHeard is when the host last answered the collector (its head
	// or replay API; live messages do not count: anyone may publish
	// them); zero when not since the collector started.
	LastHeard time.Time `json:"last_heard,omitzero"`
	// HeadTime is the time of the mirrored head event (as the host
	// stamped it); zero for an empty mirror.
	HeadTime time.Time `json:"head_time,omitzero"`
	// LastError is the last failure to reach the host or to store its
	// events, "" when none since it was last live.
	LastError string `json:"last_error,omitempty"`
}

// Status is every host's mirroring, keyed by host id.
type Status struct {
	Hosts map[string]HostStatus `json:"hosts"`
}

// Status returns a snapshot of every host's mirroring.
func (c *Collector) Status() Status {
	hosts := c.mirrors()
	s := Status{Hosts: make(map[string]HostStatus, len(hosts))}
	for _, hm := range hosts {
		s.Hosts[hm.host] = hm.status()
	}
	return s
}

// Handler serves GET /status (the Status as JSON) and GET /metrics (the
// collector's Prometheus metrics, read at scrape time).
func (c *Collector) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Metrics())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.Status())
	})
	return mux
}

// Metrics returns a prometheus.Collector of per-host metrics (label
// "host"): mirrored head, host head last seen, lag in events, refused
// (0/1), imported and dropped totals, live messages rejected, checkpoints
// verified and rejected, seconds since the host last answered and the
// age of the mirrored head event.
// They are read at scrape time.
func (c *Collector) Metrics() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("leaseledger_collector_"+name, help, []string{"host"}, nil)
	}
	return &metrics{c: c,
		head:     d("mirrored_head_seq", "Seq of the last event stored in the host's mirror."),
		hostHead: d("host_head_seq", "Highest head seq the host last reported."),
		lag:      d("lag_events", "Events the mirror is behind the host's last reported head."),
		refused:  d("refused", "1 when the host's chain was refused (REFUSED.json holds the finding)."),
		imported: d("imported_events_total", "Events stored in the host's mirror since the collector started."),
		dropped:  d("dropped_messages_total", "Live messages dropped on a full per-host buffer (filled by replay)."),
		liveBad:  d("live_rejected_total", "Live messages found not to be the host's (its replay says otherwise, or malformed): ignored."),
		cpOK:     d("checkpoints_verified_total", "Signed checkpoints of the host found equal to its mirror."),
		cpBad:    d("checkpoints_rejected_total", "Checkpoints of the host whose signature did not verify (ignored)."),
		heardAge: d("last_heard_age_seconds", "Seconds since the host last answered the collector (its head or replay API); since the collector started when not since."),
		headAge:  d("mirrored_head_age_seconds", "Seconds since the time of the mirrored head event (as the host stamped it); absent for an empty mirror."),
	}
}

type metrics struct {
	c                                               *Collector
	head, hostHead, lag, refused, imported, dropped *prometheus.Desc
	liveBad, cpOK, cpBad, heardAge, headAge         *prometheus.Desc
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.head, m.hostHead, m.lag, m.refused, m.imported, m.dropped, m.liveBad, m.cpOK, m.cpBad, m.heardAge, m.headAge} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	now := m.c.opts.Now()
	for _, hm := range m.c.mirrors() {
		s := hm.status()
		heard := s.LastHeard
		if heard.IsZero() {
			heard = m.c.started
		}
		ch <- prometheus.MustNewConstMetric(m.heardAge, prometheus.GaugeValue, max(now.Sub(heard), 0).Seconds(), hm.host)
		if !s.HeadTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.headAge, prometheus.GaugeValue, max(now.Sub(s.HeadTime), 0).Seconds(), hm.host)
		}
		refused := 0.0
		if s.State == StateRefused {
			refused = 1
		}
		ch <- prometheus.MustNewConstMetric(m.head, prometheus.GaugeValue, float64(s.Head), hm.host)
		ch <- prometheus.MustNewConstMetric(m.hostHead, prometheus.GaugeValue, float64(s.HostHead), hm.host)
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(s.Lag), hm.host)
		ch <- prometheus.MustNewConstMetric(m.refused, prometheus.GaugeValue, refused, hm.host)
		ch <- prometheus.MustNewConstMetric(m.imported, prometheus.CounterValue, float64(s.Imported), hm.host)
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(s.Dropped), hm.host)
		ch <- prometheus.MustNewConstMetric(m.liveBad, prometheus.CounterValue, float64(s.LiveRejected), hm.host)
		ch <- prometheus.MustNewConstMetric(m.cpOK, prometheus.CounterValue, float64(s.CheckpointsVerified), hm.host)
		ch <- prometheus.MustNewConstMetric(m.cpBad, prometheus.CounterValue, float64(s.CheckpointsRejected), hm.host)
	}
}
