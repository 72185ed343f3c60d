package limits

// Occupy is Evaluate for a concurrency limit, for the request whose hold
// is hold: it takes a slot for the request if hits is above 0, while
// fewer than Requests slots are taken; a request that holds a slot
// already keeps it (a retry of the call), and its slot is renewed. Zero
// hits ask whether a request could take a slot now. Slots expire one
// Window after they were taken or renewed, so that a request whose
// stream-end call never comes holds its slot no longer than that.
//
// Over, Reset is how long until the soonest slot expires (a refund may
// free one sooner); otherwise how long until every slot has expired.
// Remaining is how many more requests could take a slot. The slots are
// copied, so st's own are never changed.
func (l *Limit) Occupy(st State, now int64, hold string, hits uint64) (Outcome, State) {
	live := liveSlots(st, now)
	held := -1
	for i, s := range live {
		if s.Hold == hold {
			held = i
		}
	}
	if held < 0 && uint64(len(live)) >= l.Requests {
		reset := int64(0)
		if len(live) > 0 {
			reset = live[0].Until - now
		}
		return Outcome{Over: true, Remaining: l.Requests - min(uint64(len(live)), l.Requests), Reset: micros(reset)}, st
	}
	if hits > 0 {
		if held >= 0 {
			live = append(live[:held], live[held+1:]...)
		}
		live = append(live, Slot{Hold: hold, Until: now + l.window.Microseconds()})
	}
	next := slotState(live)
	out := Outcome{Remaining: l.Requests - min(uint64(len(live)), l.Requests)}
	if n := len(live); n > 0 {
		out.Reset = micros(live[n-1].Until - now)
	}
	return out, next
}

// Vacate frees the slot of the request whose hold is hold on a
// concurrency limit: a refund names its request. A hold that has no slot
// (the request was refused, or freed already, or its slot expired) frees
// nothing, so a refused request's stream-end call never frees another
// request's slot, and a second one frees nothing.
func (l *Limit) Vacate(st State, now int64, hold string) State {
	live := liveSlots(st, now)
	for i, s := range live {
		if s.Hold == hold {
			live = append(live[:i], live[i+1:]...)
			break
		}
	}
	return slotState(live)
}

// liveSlots returns a copy of st's slots that have not expired at now.
func liveSlots(st State, now int64) []Slot {
	var live []Slot
	for _, s := range st.Slots {
		if s.Until > now {
			live = append(live, s)
		}
	}
	return live
}

// slotState returns the state that holds slots, soonest to expire first:
// the zero State if there are none.
func slotState(slots []Slot) State {
	if len(slots) == 0 {
		return State{}
	}
	return State{Slots: slots, Expire: slots[len(slots)-1].Until}
}
