package policy

import "github.com/aerie-dev/aerie/schema"

// "How many prompts may I pull now?" is answered here, once for the
// pull and once for what a worker offers the others of its run.

// FreeSlots is a window's free slots: its size less the slots busy,
// never below 0. For a pull the busy slots are those taken, those an
// open pull has asked for included, so that the window stays exact
// (PullSize); for what a worker tells the others of its run, and what
// it has for hedges and looks for room with, those generating: at the
// end of a run the slots of a pull waiting on an empty stream would take
// a prompt handed back at once.
func FreeSlots(size, busy int) int { return max(size-busy, 0) }

// PullSize is how many prompts a pull asks for now, of want: every free
// slot of the window (size less taken), as long as no continuing turn
// waits for one (turns go first) and no more than the held cap leaves
// room for (held messages include those asked for and not yet come).
// Zero means wait for a slot.
func PullSize(want, size, taken, turnsWaiting, held, heldCap int) int {
	free := FreeSlots(size, taken)
	if free == 0 || turnsWaiting > 0 || held >= heldCap {
		return 0
	}
	return min(want, free, heldCap-held)
}

// PeerPulls reports whether the worker of heartbeat hb pulls its run's
// prompts: it is neither paused nor holding back from them.
func PeerPulls(hb schema.Heartbeat) bool { return !hb.Paused && !hb.TailHold && !hb.HintHold }

// PeerFree is the free slots the worker of heartbeat hb offers its run:
// none while it pulls nothing from it, else what it says it has (from a
// worker older than FreeSlots, its window less the requests it lists).
func PeerFree(hb schema.Heartbeat) int {
	if !PeerPulls(hb) {
		return 0
	}
	if hb.FreeSlots != nil {
		return max(*hb.FreeSlots, 0)
	}
	return FreeSlots(hb.Window, len(hb.InFlightTokens))
}
