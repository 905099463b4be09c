// Command kstatus-verdict prints kstatus' verdict on one Kubernetes object.
//
// It reads the object (YAML or JSON) on stdin, computes its status with the kstatus library exactly
// as Flux's kustomize-controller does for a health check (status.Compute, the generic reader's rule
// for a custom kind), and prints {"status": ..., "message": ...} as one JSON line. The localcluster
// build compiles it against the kstatus module and version kustomize-controller requires
// (versions.KSTATUS_MODULE, versions.KSTATUS). Exit 2 on input it cannot read or compute.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus-verdict: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// YAML is turned into JSON first, so that integers decode as int64 the way a client reads an
	// object from kube-apiserver (kstatus reads generation and observedGeneration as int64).
	document, err := yaml.YAMLToJSON(input)
	if err != nil {
		fail("not YAML or JSON: %v", err)
	}
	object := &unstructured.Unstructured{}
	if err := object.UnmarshalJSON(document); err != nil {
		fail("not a Kubernetes object: %v", err)
	}
	result, err := status.Compute(object)
	if err != nil {
		fail("kstatus: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(verdict{Status: string(result.Status), Message: result.Message}); err != nil {
		fail("writing the verdict: %v", err)
	}
}
