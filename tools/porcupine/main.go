// Command porcupine-check checks a history exported by the nemesis suite
// (e2e/nemesis/porcupine.py) with Porcupine, the linearizability checker etcd's
// robustness tests use: an independent second opinion next to our own checker
// (e2e/nemesis/linearizable.py).
//
// The model is one versioned document per key (checked key by key, P-compositionality):
// the state is (version, value), (0, "") before its first write.
//
//   - read -> (version, value): the state at its linearization point.
//   - write(value) -> version: a blind write; the version moves up by one.
//   - cas(expected, value) -> ok: If-Match; the state was at version expected and becomes
//     (expected+1, value). A cas refused with 409 version_conflict: the version was not expected.
//   - An indeterminate operation (a timeout, a torn connection, a 5xx: "info") has an unknown
//     return (its return time is the end of the history) and may or may not have applied.
//     An indeterminate cas may also have been burned by its coordinator: the previous document
//     installed again at expected+2 (cluster/fencing.py), which the exporter sends as a
//     separate indeterminate "burn" operation.
//
// Input: JSON lines, {"init": {"key": [version, value]}} and {"op": {...}} (see Op).
// Exit status: 0 linearizable, 1 a violation (every illegal key is printed), 2 unknown
// (the check timed out) or bad input. -html writes Porcupine's visualization.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one exported operation.
type Op struct {
	Client   int    `json:"client"`
	Key      string `json:"key"`
	F        string `json:"f"` // read | write | cas | cas_fail | burn
	Call     int64  `json:"call"`
	Return   *int64 `json:"return"` // null: unknown (indeterminate)
	Expected int64  `json:"expected"`
	Value    string `json:"value"`
	Previous string `json:"previous"`
	Version  int64  `json:"version"` // a read's version, a write's acknowledged version
}

// State of one register.
type State struct {
	Version int64
	Value   string
}

// Input of one operation to the model.
type Input struct {
	F        string
	Key      string
	Expected int64
	Value    string
	Previous string
	Unknown  bool
}

// Output of one operation.
type Output struct {
	Version int64
	Value   string
}

func step(s State, in Input, out Output) []State {
	switch in.F {
	case "read":
		if s.Version == out.Version && s.Value == out.Value {
			return []State{s}
		}
		return nil
	case "write":
		next := State{s.Version + 1, in.Value}
		if in.Unknown {
			return []State{s, next}
		}
		if out.Version == next.Version {
			return []State{next}
		}
		return nil
	case "cas":
		applies := s.Version == in.Expected
		if in.Unknown {
			if applies {
				return []State{s, {in.Expected + 1, in.Value}}
			}
			return []State{s}
		}
		if applies {
			return []State{{in.Expected + 1, in.Value}}
		}
		return nil
	case "cas_fail":
		if s.Version != in.Expected {
			return []State{s}
		}
		return nil
	case "burn": // always indeterminate: the failed cas's record (or nothing) replaced at expected+2
		if s == (State{in.Expected, in.Previous}) || s == (State{in.Expected + 1, in.Value}) {
			return []State{s, {in.Expected + 2, in.Previous}}
		}
		return []State{s}
	}
	return nil
}

// Model builds the register model with the initial states of the keys.
func Model(initial map[string]State) porcupine.Model {
	model := &porcupine.NondeterministicModel{
		// Every key starts at its own state: the history is partitioned by key first, so the
		// initial state is chosen by the key of the partition's first operation (see main).
		Init: func() []interface{} { return []interface{}{State{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(State)
			in := input.(Input)
			if s == (State{}) {
				if init, ok := initial[in.Key]; ok {
					s = init
				}
			}
			var out []interface{}
			for _, next := range step(s, in, output.(Output)) {
				out = append(out, next)
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(Input), output.(Output)
			switch in.F {
			case "read":
				return fmt.Sprintf("read %s -> v%d %q", in.Key, out.Version, out.Value)
			case "write":
				return fmt.Sprintf("write %s %q -> v%d", in.Key, in.Value, out.Version)
			case "burn":
				return fmt.Sprintf("burn %s v%d -> v%d %q", in.Key, in.Expected, in.Expected+2, in.Previous)
			}
			return fmt.Sprintf("%s %s if v%d %q", in.F, in.Key, in.Expected, in.Value)
		},
		DescribeState: func(state interface{}) string {
			s := state.(State)
			return fmt.Sprintf("v%d %q", s.Version, s.Value)
		},
	}
	return model.ToModel()
}

func read(path string) (map[string]State, []porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	initial := map[string]State{}
	var ops []porcupine.Operation
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for line := 1; scanner.Scan(); line++ {
		var row struct {
			Init map[string][2]json.RawMessage `json:"init"`
			Op   *Op                           `json:"op"`
		}
		if err := json.Unmarshal(scanner.Bytes(), &row); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", line, err)
		}
		for key, pair := range row.Init {
			var s State
			if err := json.Unmarshal(pair[0], &s.Version); err != nil {
				return nil, nil, fmt.Errorf("line %d: init %s: %w", line, key, err)
			}
			if err := json.Unmarshal(pair[1], &s.Value); err != nil {
				return nil, nil, fmt.Errorf("line %d: init %s: %w", line, key, err)
			}
			initial[key] = s
		}
		if op := row.Op; op != nil {
			ret := int64(math.MaxInt64)
			if op.Return != nil {
				ret = *op.Return
			}
			ops = append(ops, porcupine.Operation{
				ClientId: op.Client,
				Input: Input{
					F: op.F, Key: op.Key, Expected: op.Expected, Value: op.Value,
					Previous: op.Previous, Unknown: op.Return == nil,
				},
				Call:   op.Call,
				Output: Output{Version: op.Version, Value: op.Value},
				Return: ret,
			})
		}
	}
	return initial, ops, scanner.Err()
}

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "give up (exit 2) after this long")
	html := flag.String("html", "", "write Porcupine's visualization of the history here")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcupine-check [-timeout D] [-html FILE] HISTORY.jsonl")
		os.Exit(2)
	}
	initial, ops, err := read(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "porcupine-check:", err)
		os.Exit(2)
	}
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		key := op.Input.(Input).Key
		byKey[key] = append(byKey[key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	status := 0
	for _, key := range keys {
		model := Model(map[string]State{key: initial[key]})
		result, info := porcupine.CheckOperationsVerbose(model, byKey[key], *timeout)
		fmt.Printf("%s: %d operations: %s\n", key, len(byKey[key]), result)
		switch result {
		case porcupine.Illegal:
			status = 1
			if *html != "" {
				if err := porcupine.VisualizePath(model, info, *html); err != nil {
					fmt.Fprintln(os.Stderr, "porcupine-check: visualization:", err)
				}
			}
		case porcupine.Unknown:
			if status == 0 {
				status = 2
			}
		}
	}
	if status == 0 {
		fmt.Printf("linearizable: %d operations over %d keys\n", len(ops), len(keys))
	}
	os.Exit(status)
}
