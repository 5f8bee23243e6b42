package busclient

import (
	"encoding/json"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
)

// Host announcements: a clustered host's bus (bus.Options.HostID with a
// cluster) publishes, every bus.Options.AnnounceInterval, an Announcement
// on HostSubject(host, AnnounceSubject) — leaseledger.hosts.<host>.announce
// — so a collector with host discovery (collect --hosts auto or a pattern)
// finds a host it was not told about. The subject is in the host's own
// space: only the host's bus's own publisher may publish it (no client of
// any host, no client-port client of a peer). An announcement is a hint:
// a collector mirrors the announced host only through the host's own API
// (its head and replay, fully verified), and a host whose chain it holds
// differently stays refused.

// AnnounceSubject carries a clustered host's Announcement, in the host's
// space (HostSubject).
const AnnounceSubject = "leaseledger.announce"

// MaxAnnouncementBytes bounds one announcement; a larger one is not an
// announcement (ParseAnnouncement refuses it).
const MaxAnnouncementBytes = 1 << 10

// Announcement is what a host announces: its id and its durable head.
type Announcement struct {
	Host string     `json:"host"`
	Head events.Seq `json:"head"`
}

// FleetAnnounceSubjects matches every host's announcement.
func FleetAnnounceSubjects() string { return HostSubject(events.Wildcard, AnnounceSubject) }

// ParseAnnouncement parses the announcement data received on subject: it
// must be at most MaxAnnouncementBytes of JSON naming a valid host id, the
// host of subject's space.
func ParseAnnouncement(subject string, data []byte) (Announcement, error) {
	var a Announcement
	if len(data) > MaxAnnouncementBytes {
		return a, fmt.Errorf("announcement on %s: %d bytes, at most MaxAnnouncementBytes=%d", subject, len(data), MaxAnnouncementBytes)
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("announcement on %s: %w", subject, err)
	}
	host, ok := HostOfSubject(subject)
	if !ok || subject != HostSubject(host, AnnounceSubject) || a.Host != host {
		return a, fmt.Errorf("announcement on %s names host %q: not the subject's host", subject, a.Host)
	}
	return a, nil
}
