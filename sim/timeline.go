package sim

import "fmt"

// TimelinePoint is the memory state of one executed step: the most bytes
// allocated and reserved during the step (for a compute step that is with
// its outputs and workspace allocated), and the compute clock at its end.
type TimelinePoint struct {
	Allocated int64 `json:"allocated"`
	Reserved  int64 `json:"reserved"`
	TimeNs    int64 `json:"time_ns"`
}

// EventKind is what a trace event records.
type EventKind uint8

// Trace event kinds.
const (
	// EvCompute is a first run of an op on the compute stream.
	EvCompute EventKind = iota + 1
	// EvRecompute is a further run of an op.
	EvRecompute
	// EvSwapOut is a device-to-host copy on the copy stream.
	EvSwapOut
	// EvSwapIn is a host-to-device copy on the copy stream.
	EvSwapIn
	// EvMemory samples memory after a step (a counter).
	EvMemory
)

var eventNames = [...]string{"", "compute", "recompute", "swap_out", "swap_in", "memory"}

// String returns the kind's name.
func (k EventKind) String() string {
	if k < EvCompute || k > EvMemory {
		return fmt.Sprintf("event(%d)", uint8(k))
	}
	return eventNames[k]
}

// MarshalText implements encoding.TextMarshaler.
func (k EventKind) MarshalText() ([]byte, error) {
	if k < EvCompute || k > EvMemory {
		return nil, fmt.Errorf("event kind %d: not valid", uint8(k))
	}
	return []byte(eventNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *EventKind) UnmarshalText(b []byte) error {
	for i := EvCompute; i <= EvMemory; i++ {
		if eventNames[i] == string(b) {
			*k = i
			return nil
		}
	}
	return fmt.Errorf("event kind %q: expected compute, recompute, swap_out, swap_in or memory", b)
}

// Event is one trace record. ID is the op (compute, recompute) or the tensor
// (swaps); memory samples carry Allocated and Reserved at StartNs.
type Event struct {
	Kind      EventKind `json:"kind"`
	Step      int       `json:"step"`
	ID        int32     `json:"id"`
	StartNs   int64     `json:"start_ns"`
	DurNs     int64     `json:"dur_ns"`
	Allocated int64     `json:"allocated,omitempty"`
	Reserved  int64     `json:"reserved,omitempty"`
}
