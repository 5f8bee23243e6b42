package projector

import "github.com/leaseledger/leaseledger/events"

// Request handles: registered per owner and counted per activation by
// method, their wire ids followed, settled by the owner's end.

// ---- requests ----

// requestRegistered registers a handle, counted in a (the event's
// activation, nil when none) by method.
func (s *State) requestRegistered(e *event, a *Activation, p *events.RequestRegistered) {
	o := s.owners[p.Owner]
	if o == nil {
		o = &Owner{ID: p.Owner}
		s.owners[p.Owner] = o
	}
	if o.Ended {
		o.Anomalies++ // registered after the owner's end
	}
	o.changedSeq = e.seq
	if prev, ok := s.ownerOf[p.Handle]; ok {
		s.owners[prev].Anomalies++ // duplicate handle: the newer registration wins
		delete(s.owners[prev].Handles, p.Handle)
		s.owners[prev].changedSeq = e.seq // may retire it
	}
	if o.Handles == nil {
		o.Handles = map[string]*Request{}
	}
	o.Handles[p.Handle] = &Request{Handle: p.Handle, Owner: p.Owner, Activation: e.activation, Method: p.Method,
		URISHA256: p.URISHA256, TimeoutNS: p.TimeoutNS, State: RequestRegistered, RegisteredSeq: e.seq}
	s.ownerOf[p.Handle] = p.Owner
	if a != nil {
		a.requestCounts(p.Method).Registered++
	}
}

func (s *State) requestFor(handle string) *Request {
	if o, ok := s.ownerOf[handle]; ok {
		return s.owners[o].Handles[handle]
	}
	s.anomalies.OrphanRequest++
	return nil
}

func (r *Request) addWireID(id string) {
	if len(r.WireIDs) >= MaxWireIDs {
		r.WireIDsDropped++
		return
	}
	r.WireIDs = append(r.WireIDs, id)
}

func (s *State) ownerEnded(e *event, p *events.RequestOwnerEnded) {
	o := s.owners[p.Owner]
	if o == nil {
		o = &Owner{ID: p.Owner}
		s.owners[p.Owner] = o
	}
	o.changedSeq = e.seq
	if o.Ended {
		o.Anomalies++
		return
	}
	o.Ended, o.EndedSeq, o.HandlesSettled = true, e.seq, p.HandlesSettled
	sum := &OwnerSummary{}
	for h, r := range o.Handles {
		switch r.State {
		case RequestCompleted:
			sum.Completed++
		case RequestCancelled:
			sum.Cancelled++
		default:
			sum.Unsettled++
		}
		delete(s.ownerOf, h)
	}
	o.Summary, o.Handles = sum, nil
}
