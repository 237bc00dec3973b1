package dtrlog

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrInvalid is wrapped by every error about a log that is well-formed line
// by line but inconsistent (unknown tensors, a CALL without its MEMORY and
// ALIAS lines, a CONSTANT without its MEMORY line, ...).
var ErrInvalid = errors.New("invalid dtr log")

// Op is one operator of a Trace: a CALL, a MUTATE (whose results are new
// versions of the mutated arguments) or a CONSTANT (no arguments, cost 0).
type Op struct {
	Name     string
	Line     int   // line of the CALL / MUTATE / CONSTANT
	Time     int64 // ns
	Args     []int32
	Results  []int32
	Sizes    []int64 // bytes of each result (0 for an alias)
	Aliases  []int32 // -1, or the index into Args whose storage the result views
	Constant bool
	Mutate   bool
	Backward bool
}

// TotalSize returns the bytes the op allocates (sum of its result sizes).
func (o *Op) TotalSize() int64 {
	var s int64
	for _, x := range o.Sizes {
		s += x
	}
	return s
}

// Tensor is one tensor of a Trace.
type Tensor struct {
	Name  string
	Op    int32 // producing op
	Index int32 // index among the op's results
	// Storage is the tensor whose storage this one uses (itself unless it is
	// an alias); StorageSize is that storage's size.
	Storage     int32
	StorageSize int64
}

// CmdKind says what a schedule command does.
type CmdKind uint8

// Schedule commands (the replay semantics of simrd).
const (
	// CmdCompute runs op ID for the first time (creating its results).
	CmdCompute CmdKind = iota + 1
	// CmdGet adds an external reference to tensor ID.
	CmdGet
	// CmdRelease drops an external reference to tensor ID.
	CmdRelease
	// CmdPin rematerializes tensor ID if needed and pins its storage.
	CmdPin
)

var cmdNames = [...]string{"", "compute", "get", "release", "pin"}

// String returns the command's name.
func (k CmdKind) String() string {
	if k < CmdCompute || k > CmdPin {
		return fmt.Sprintf("cmd(%d)", uint8(k))
	}
	return cmdNames[k]
}

// Cmd is one schedule command; ID is an op for CmdCompute, else a tensor.
type Cmd struct {
	Kind CmdKind
	ID   int32
}

// Trace is a compiled log: ops and tensors in creation order (tensor IDs are
// assigned in the order results appear) and the schedule replaying it.
type Trace struct {
	Name    string
	Ops     []Op
	Tensors []Tensor
	Cmds    []Cmd
	// Outputs are the tensors still referenced at the end (pinned).
	Outputs []int32
}

// Compile reads a log and compiles it. Lines before the START annotation are
// skipped (a log without START is compiled whole).
func Compile(r io.Reader) (*Trace, error) {
	return compile(newCompiler(), r)
}

// compile is Compile with compiler c.
func compile(c *compiler, r io.Reader) (*Trace, error) {
	rd := NewReader(r)
	var pending []Instr // instructions before START, dropped if START comes
	started := false
	var in Instr
	for {
		err := rd.next(&in)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if !started {
			if in.Kind == Annotate && in.Annotation == AnnotationStart {
				started = true
				pending = nil
				// the compiler keeps nothing of an instruction's slices:
				// the reader may decode each line into the same ones
				rd.dec.reuse = true
				continue
			}
			pending = append(pending, in)
			continue
		}
		if err := c.feed(&in); err != nil {
			return nil, err
		}
	}
	if !started {
		for i := range pending {
			if err := c.feed(&pending[i]); err != nil {
				return nil, err
			}
		}
	}
	return c.finish()
}

// CompileInstrs compiles instructions already read (all of them are used:
// the caller drops lines before START if it wants to).
func CompileInstrs(ins []Instr) (*Trace, error) {
	c := newCompiler()
	for i := range ins {
		if err := c.feed(&ins[i]); err != nil {
			return nil, err
		}
	}
	return c.finish()
}

type compiler struct {
	t Trace
	// A name's index (into binding) is in xnames (plus one) for the
	// numbered names of its letter within its window (names.go), else in
	// names.
	xnames  window[int32]
	names   map[string]int32
	binding []int32 // per name index: tensor
	ref     []int32 // per tensor: references by name
	inBwd   bool
	// want is a CALL/CONSTANT waiting for its MEMORY/ALIAS lines (when
	// waiting), with copies of its Args and Results (the reader reuses the
	// instruction's) in wantArgs and wantResults.
	want                  wantedOp
	waiting               bool
	wantArgs, wantResults []string
	mems                  []int64     // MEMORY of each result so far
	aliases               []aliasLine // ALIAS line of each result so far
	// ids and sizes hold the ops' Args, Results, Aliases and Sizes.
	ids   slab[int32]
	sizes slab[int64]

	// sink, when set, receives each op as it is made (its results are in
	// the tensors) instead of the trace keeping it, and the trace keeps no
	// commands nor outputs: ReadGraph builds its graph so, where the whole
	// trace beside the graph was about half of a million-op log's live
	// heap. nops counts the ops made; calls, the CALLs and MUTATEs;
	// time and memory sum their TIMEs and MEMORYs (for finish's range
	// check) until the first sum past MaxTotal, which totalErr keeps.
	sink         func(op int32, o *Op)
	sinkOp       Op
	nops         int32
	calls        int
	time, memory int64
	totalErr     error
}

// wantedOp is what the compiler keeps of a CALL or CONSTANT line until its
// MEMORY and ALIAS lines.
type wantedOp struct {
	Kind Kind
	Line int
	Name string
	Time int64
}

// aliasLine is what the compiler keeps of an ALIAS line.
type aliasLine struct {
	line, alias int
}

func newCompiler() *compiler {
	return &compiler{}
}

func lineErr(line int, format string, a ...any) error {
	return &LineError{Line: line, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))}
}

// index returns the index of a defined name.
func (c *compiler) index(name string) (int32, bool) {
	if p, n, ok := numbered(name); ok && c.xnames.holds(p) {
		if i, ok := c.xnames.get(n); ok {
			return i - 1, true
		}
	}
	i, ok := c.names[name]
	return i, ok
}

// unknown is the error for an argument naming no tensor.
func unknown(line int, field, name string) error {
	return lineErr(line, "%s %q: unknown tensor (not created by an earlier CONSTANT, CALL, MUTATE or COPY)", field, name)
}

func (c *compiler) lookup(line int, field, name string) (int32, error) {
	i, ok := c.index(name)
	if !ok {
		return -1, unknown(line, field, name)
	}
	return c.binding[i], nil
}

// lookupArgs returns the tensors of the arguments of op name (of kind k).
func (c *compiler) lookupArgs(line int, k, name string, names []string) ([]int32, error) {
	args := c.ids.cut(len(names))
	for j, a := range names {
		i, ok := c.index(a)
		if !ok {
			return nil, unknown(line, fmt.Sprintf("%s %q ARGS[%d]", k, name, j), a)
		}
		args[j] = c.binding[i]
	}
	return args, nil
}

func (c *compiler) bind(line int, name string, t int32) error {
	if _, ok := c.index(name); ok {
		return lineErr(line, "tensor name %q is defined twice", name)
	}
	i := int32(len(c.binding))
	if p, n, ok := numbered(name); ok && c.xnames.holds(p) && c.xnames.fits(n) {
		c.xnames.set(p, n, i+1)
	} else {
		if c.names == nil {
			c.names = map[string]int32{}
		}
		c.names[name] = i
	}
	c.binding = append(c.binding, t)
	c.ref[t]++
	return nil
}

func (c *compiler) newTensor(name string, op, index int32) int32 {
	id := int32(len(c.t.Tensors))
	c.t.Tensors = append(c.t.Tensors, Tensor{Name: name, Op: op, Index: index, Storage: id})
	c.ref = append(c.ref, 0)
	return id
}

// feed compiles one instruction (keeping none of its slices).
func (c *compiler) feed(in *Instr) error {
	// Instructions built in code (CompileInstrs) get the same range checks
	// as parsed lines.
	if in.Memory < 0 {
		return lineErr(in.Line, "MEMORY of %q is %d, expected >= 0", in.Name, in.Memory)
	}
	if in.Time < 0 {
		return lineErr(in.Line, "TIME of %s %q is %d, expected >= 0", in.Kind, in.Name, in.Time)
	}
	if c.waiting {
		return c.feedPending(in)
	}
	switch in.Kind {
	case Annotate:
		if in.Annotation == AnnotationBackward {
			c.inBwd = true
		}
	case Constant, Call:
		c.want, c.waiting = wantedOp{Kind: in.Kind, Line: in.Line, Name: in.Name, Time: in.Time}, true
		c.wantArgs = append(c.wantArgs[:0], in.Args...)
		c.wantResults = append(c.wantResults[:0], in.Results...)
		c.mems, c.aliases = c.mems[:0], c.aliases[:0]
		if in.Kind == Call && len(in.Results) == 0 {
			return c.finishCall()
		}
	case Memory:
		return lineErr(in.Line, "MEMORY line for %q does not follow a CONSTANT or CALL", in.Name)
	case Alias:
		return lineErr(in.Line, "ALIAS line for %q does not follow a CALL", in.Name)
	case Copy:
		src, err := c.lookup(in.Line, "COPY SRC", in.Src)
		if err != nil {
			return err
		}
		if err := c.bind(in.Line, in.Dst, src); err != nil {
			return err
		}
		c.cmd(Cmd{CmdGet, src})
	case CopyFrom:
		i, ok := c.index(in.Dst)
		if !ok {
			return lineErr(in.Line, "COPY_FROM DST %q: unknown tensor", in.Dst)
		}
		src, err := c.lookup(in.Line, "COPY_FROM SRC", in.Src)
		if err != nil {
			return err
		}
		old := c.binding[i]
		c.binding[i] = src
		c.ref[old]--
		c.ref[src]++
		c.cmd(Cmd{CmdRelease, old}, Cmd{CmdGet, src})
	case Release:
		i, ok := c.index(in.Name)
		if !ok {
			return nil // unknown names are ignored, as by the reference
		}
		t := c.binding[i]
		if c.ref[t] <= 0 {
			return lineErr(in.Line, "RELEASE %q: tensor has no references left", in.Name)
		}
		c.ref[t]--
		c.cmd(Cmd{CmdRelease, t})
	case Mutate:
		return c.mutate(in)
	default:
		return lineErr(in.Line, "instruction kind %d: expected a defined kind", in.Kind)
	}
	return nil
}

func (c *compiler) feedPending(in *Instr) error {
	w := &c.want
	if w.Kind == Constant {
		if in.Kind != Memory || in.Name != w.Name {
			return lineErr(in.Line, "CONSTANT %q (line %d) must be followed by its MEMORY line, got %s", w.Name, w.Line, describe(in))
		}
		c.waiting = false
		op := c.nops
		t := c.newTensor(w.Name, op, 0)
		c.t.Tensors[t].StorageSize = in.Memory
		o := Op{Name: "constant", Line: w.Line, Results: c.ids.cut(1), Sizes: c.sizes.cut(1), Aliases: c.ids.cut(1), Constant: true, Backward: c.inBwd}
		o.Results[0], o.Sizes[0], o.Aliases[0] = t, in.Memory, -1
		c.addOp(o)
		if err := c.bind(in.Line, w.Name, t); err != nil {
			return err
		}
		c.cmd(Cmd{CmdCompute, op}, Cmd{CmdPin, t})
		return nil
	}
	// CALL: MEMORY, ALIAS pairs per result, in order.
	i := len(c.aliases)
	res := c.wantResults
	if len(c.mems) == i {
		if in.Kind != Memory || in.Name != res[i] {
			return lineErr(in.Line, "CALL %q (line %d): result %d %q needs a MEMORY line here, got %s", w.Name, w.Line, i, res[i], describe(in))
		}
		c.mems = append(c.mems, in.Memory)
		return nil
	}
	if in.Kind != Alias || in.Name != res[i] {
		return lineErr(in.Line, "CALL %q (line %d): result %d %q needs an ALIAS line here, got %s", w.Name, w.Line, i, res[i], describe(in))
	}
	c.aliases = append(c.aliases, aliasLine{line: in.Line, alias: in.Alias})
	if len(c.aliases) == len(res) {
		return c.finishCall()
	}
	return nil
}

// opKind names the instruction an op came from.
func opKind(o *Op) string {
	switch {
	case o.Constant:
		return "CONSTANT"
	case o.Mutate:
		return "MUTATE"
	}
	return "CALL"
}

func describe(in *Instr) string {
	if in.Name != "" {
		return fmt.Sprintf("%s %q", in.Kind, in.Name)
	}
	return in.Kind.String()
}

func (c *compiler) finishCall() error {
	w := &c.want
	c.waiting = false
	args, err := c.lookupArgs(w.Line, "CALL", w.Name, c.wantArgs)
	if err != nil {
		return err
	}
	if strings.Contains(w.Name, "backward") {
		c.inBwd = true
	}
	op := c.nops
	res := c.wantResults
	n := len(res)
	o := Op{Name: w.Name, Line: w.Line, Time: w.Time, Args: args, Results: c.ids.cut(n), Sizes: c.sizes.cut(n), Aliases: c.ids.cut(n), Backward: c.inBwd}
	for i := 0; i < n; i++ {
		al := c.aliases[i].alias
		if al >= len(args) {
			return lineErr(c.aliases[i].line, "ALIAS of %q is %d, expected -1 or an index into the %d ARGS of CALL %q", res[i], al, len(args), w.Name)
		}
		t := c.newTensor(res[i], op, int32(i))
		o.Results[i] = t
		o.Aliases[i] = int32(al)
		if al >= 0 {
			base := c.t.Tensors[args[al]].Storage
			c.t.Tensors[t].Storage = base
			c.t.Tensors[t].StorageSize = c.t.Tensors[base].StorageSize
		} else {
			o.Sizes[i] = c.mems[i]
			c.t.Tensors[t].StorageSize = o.Sizes[i]
		}
	}
	c.addOp(o)
	for i := 0; i < n; i++ {
		if err := c.bind(w.Line, res[i], o.Results[i]); err != nil {
			return err
		}
	}
	c.cmd(Cmd{CmdCompute, op})
	return nil
}

func (c *compiler) mutate(in *Instr) error {
	args, err := c.lookupArgs(in.Line, "MUTATE", in.Name, in.Args)
	if err != nil {
		return err
	}
	if strings.Contains(in.Name, "backward") {
		c.inBwd = true
	}
	op := c.nops
	n := len(in.Mutate)
	o := Op{Name: in.Name, Line: in.Line, Time: in.Time, Args: args, Results: c.ids.cut(n), Sizes: c.sizes.cut(n), Aliases: c.ids.cut(n), Mutate: true, Backward: c.inBwd}
	for i, m := range in.Mutate {
		if m < 0 || m >= len(args) {
			return lineErr(in.Line, "MUTATE[%d] of %q is %d, expected an index into its %d ARGS", i, in.Name, m, len(args))
		}
		src := &c.t.Tensors[args[m]]
		t := c.newTensor(src.Name+"$", op, int32(i))
		o.Results[i] = t
		o.Aliases[i] = -1
		o.Sizes[i] = c.t.Tensors[args[m]].StorageSize
		c.t.Tensors[t].StorageSize = o.Sizes[i]
	}
	c.addOp(o)
	c.cmd(Cmd{CmdCompute, op})
	for i, m := range in.Mutate {
		idx, _ := c.index(in.Args[m])
		old := c.binding[idx]
		c.binding[idx] = o.Results[i]
		c.ref[o.Results[i]] = 1
		c.ref[old]--
		c.cmd(Cmd{CmdRelease, old})
	}
	return nil
}

// addOp adds op o (number c.nops): to the trace, or to the sink (from
// c.sinkOp: a pointer to a local would move every op to the heap).
func (c *compiler) addOp(o Op) {
	if c.sink == nil {
		c.t.Ops = append(c.t.Ops, o)
	} else {
		c.sinkOp = o
		c.total(&c.sinkOp)
		c.sink(c.nops, &c.sinkOp)
		c.sinkOp = Op{}
	}
	c.nops++
}

// cmd appends schedule commands (none when the ops go to a sink).
func (c *compiler) cmd(cmds ...Cmd) {
	if c.sink == nil {
		c.t.Cmds = append(c.t.Cmds, cmds...)
	}
}

// total adds op o to the sums of TIMEs and MEMORYs, keeping the error for
// the first op that takes one past MaxTotal (reported by finish, as the
// check over the trace's ops does).
func (c *compiler) total(o *Op) {
	if !o.Constant {
		c.calls++
	}
	if c.totalErr != nil {
		return
	}
	c.time += o.Time
	if o.Time > MaxTotal || c.time > MaxTotal {
		c.totalErr = lineErr(o.Line, "the TIMEs add up past %d ns at %s %q: expected a smaller total", MaxTotal, opKind(o), o.Name)
		return
	}
	for _, sz := range o.Sizes {
		c.memory += sz
		if sz > MaxTotal || c.memory > MaxTotal {
			c.totalErr = lineErr(o.Line, "the MEMORYs add up past %d bytes at %s %q: expected a smaller total", MaxTotal, opKind(o), o.Name)
			return
		}
	}
}

// slabChunk is the longest chunk a slab allocates for small slices.
const slabChunk = 1024

// slab cuts the small slices of ops from shared chunks: one allocation per
// chunk instead of one per slice.
type slab[E any] struct {
	free  []E
	chunk int // length of the last chunk
}

// cut returns a new zeroed slice (not nil) of length and capacity n.
func (s *slab[E]) cut(n int) []E {
	if n > len(s.free) || s.free == nil {
		s.chunk = min(max(2*s.chunk, 64), slabChunk)
		s.free = make([]E, max(n, s.chunk))
	}
	x := s.free[:n:n]
	s.free = s.free[n:]
	return x
}

// MaxTotal is the largest sum of the TIMEs (ns) and of the MEMORYs (bytes)
// of one log: 2^60, so that the runtime's clocks, budgets and costs, which
// add and multiply these sums, cannot overflow int64.
const MaxTotal = int64(1) << 60

func (c *compiler) finish() (*Trace, error) {
	if c.waiting {
		w := &c.want
		return nil, lineErr(w.Line, "%s %q: the log ends before its MEMORY/ALIAS lines", w.Kind, w.Name)
	}
	if c.sink == nil {
		for i := range c.t.Ops {
			c.total(&c.t.Ops[i])
		}
	}
	if c.totalErr != nil {
		return nil, c.totalErr
	}
	if c.calls == 0 {
		return nil, &LineError{Line: 0, Err: fmt.Errorf("%w: the log has no CALL or MUTATE instruction (after START): expected at least one op", ErrInvalid)}
	}
	if c.sink != nil {
		return &c.t, nil
	}
	// Outputs: tensors still referenced, in order of their names' first
	// definition (each name once; a tensor pinned twice is pinned once).
	seen := make([]bool, len(c.t.Tensors))
	for _, t := range c.binding {
		if c.ref[t] > 0 {
			c.cmd(Cmd{CmdPin, t})
			if !seen[t] {
				seen[t] = true
				c.t.Outputs = append(c.t.Outputs, t)
			}
		}
	}
	return &c.t, nil
}
