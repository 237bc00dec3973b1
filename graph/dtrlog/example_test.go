package dtrlog_test

import (
	"fmt"
	"strings"

	"github.com/remat-dev/remat/graph/dtrlog"
)

func ExampleCompile() {
	log := `{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"1024","NAME":"x"}
{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["y"],"TIME":"500"}
{"INSTRUCTION":"MEMORY","MEMORY":"1024","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"INSTRUCTION":"RELEASE","NAME":"x"}
`
	tr, err := dtrlog.Compile(strings.NewReader(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	g, _ := dtrlog.ToGraph(tr)
	fmt.Println(len(tr.Ops), len(tr.Cmds), tr.Tensors[tr.Outputs[0]].Name, g.Ops[0].TimeNs)
	// Output: 2 5 y 500
}
