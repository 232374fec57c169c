package main

import (
	"bytes"
	"io"
	"log"
	"os"
	"sync"
	"text/template"
	_ "unsafe" // for go:linkname

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// A template's `lookup` sees only what the release it renders made: objects Helm annotated as
// this release's (meta.helm.sh/release-name and -namespace), and the CRDs of the chart's own
// crds/ folders, which Helm installed before rendering. Any other object reads as absent, as
// does one the release's identity may not read, and a list holds only the release's own items.
// So what a render produces, and whether it fails, depends on the chart, the values and the
// release's own objects, never on what else the cluster holds or who may read it: values that
// choose what is looked up (a `tpl`'d value, a name a chart looks up) learn nothing, not even
// one bit, about objects their release did not make. Charts keep what they look up for: a
// password generated at install, their own Deployment or Secret, their CRDs, found again.
//
// Only installs and upgrades look up; `helm template` answers every lookup as absent, as Helm does.

const (
	releaseNameAnnotation      = "meta.helm.sh/release-name"
	releaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
)

// Helm's root command built around an action configuration of the caller's, as NewRootCmd
// builds it around its own.
//
//go:linkname newRootCmdWithConfig helm.sh/helm/v4/pkg/cmd.newRootCmdWithConfig
func newRootCmdWithConfig(actionConfig *action.Configuration, out io.Writer, args []string, logSetup func(bool)) (*cobra.Command, error)

//go:linkname loadReleasesInMemory helm.sh/helm/v4/pkg/cmd.loadReleasesInMemory
func loadReleasesInMemory(actionConfig *action.Configuration)

// newRootCmd is Helm's NewRootCmd, with the release's own lookup in its action configuration.
func newRootCmd(out io.Writer, args []string, logSetup func(bool)) (*cobra.Command, error) {
	actionConfig := action.NewConfiguration()
	cmd, err := newRootCmdWithConfig(actionConfig, out, args, logSetup)
	if err != nil {
		return nil, err
	}
	if command, _, err := cmd.Find(args); err == nil && (command.Name() == "upgrade" || command.Name() == "install") {
		actionConfig.CustomTemplateFuncs = template.FuncMap{"lookup": releaseLookup(command)}
	}
	cobra.OnInitialize(func() {
		helmDriver := os.Getenv("HELM_DRIVER")
		if err := actionConfig.Init(settings.RESTClientGetter(), settings.Namespace(), helmDriver); err != nil {
			log.Fatal(err)
		}
		if helmDriver == "memory" {
			loadReleasesInMemory(actionConfig)
		}
		actionConfig.SetHookOutputFunc(func(_, _, _ string) io.Writer { return log.Writer() })
	})
	return cmd, nil
}

// releaseLookup is Helm's lookup, answering only with the objects of the release that `command`
// (an install or upgrade, once its arguments are parsed) names.
func releaseLookup(command *cobra.Command) func(apiVersion, kind, namespace, name string) (map[string]any, error) {
	chartCRDs := sync.OnceValue(func() map[string]bool { return crdNames(command.Flags().Arg(1)) })
	return func(apiVersion, kind, namespace, name string) (map[string]any, error) {
		config, err := settings.RESTClientGetter().ToRESTConfig()
		if err != nil {
			return map[string]any{}, err
		}
		found, err := engine.NewLookupFunction(config)(apiVersion, kind, namespace, name)
		if apierrors.IsForbidden(err) {
			return map[string]any{}, nil
		}
		if err != nil {
			return map[string]any{}, err
		}
		release := command.Flags().Arg(0)
		if name != "" {
			if ownedBy(found, release, settings.Namespace()) || isOwnCRD(found, chartCRDs) {
				return found, nil
			}
			return map[string]any{}, nil
		}
		items, _ := found["items"].([]any)
		owned := []any{}
		for _, item := range items {
			if object, ok := item.(map[string]any); ok && (ownedBy(object, release, settings.Namespace()) || isOwnCRD(object, chartCRDs)) {
				owned = append(owned, object)
			}
		}
		if len(found) == 0 {
			return found, nil
		}
		// Nothing of the list but its items: its resourceVersion moves with every write.
		return map[string]any{"apiVersion": found["apiVersion"], "kind": found["kind"], "items": owned}, nil
	}
}

// ownedBy tells whether Helm annotated object as release's, of namespace.
func ownedBy(object map[string]any, release, namespace string) bool {
	metadata, _ := object["metadata"].(map[string]any)
	annotations, _ := metadata["annotations"].(map[string]any)
	return release != "" &&
		annotations[releaseNameAnnotation] == release &&
		annotations[releaseNamespaceAnnotation] == namespace
}

// isOwnCRD tells whether object is a CustomResourceDefinition of the chart's crds/ folders,
// whose names crds gives; asked only of CRDs, so that a chart is read only by a render that
// looks one up.
func isOwnCRD(object map[string]any, crds func() map[string]bool) bool {
	if object["kind"] != "CustomResourceDefinition" {
		return false
	}
	metadata, _ := object["metadata"].(map[string]any)
	name, _ := metadata["name"].(string)
	return crds()[name]
}

// crdNames are the names of the CRDs in the crds/ folders of the chart at path and of its
// subcharts; none when it cannot be read (then its render fails anyway).
func crdNames(path string) map[string]bool {
	names := map[string]bool{}
	chart, err := loader.Load(path)
	if err != nil {
		return names
	}
	for _, crd := range chart.CRDObjects() {
		documents := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(crd.File.Data), 4096)
		for {
			var document struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := documents.Decode(&document); err != nil {
				break
			}
			if document.Kind == "CustomResourceDefinition" {
				names[document.Metadata.Name] = true
			}
		}
	}
	return names
}
