package main

import (
	_ "unsafe" // for go:linkname

	"helm.sh/helm/v4/pkg/cli"
)

// Helm's CLI reads its settings from the environment into this package variable once, when the
// process starts; each call replaces it with settings read from the call's environment.
//
//go:linkname settings helm.sh/helm/v4/pkg/cmd.settings
var settings *cli.EnvSettings

// Each NewRootCmd adds the set-up of its own action configuration to cobra's initializers,
// which run before every command: emptied before each call, so that a call runs only its own.
//
//go:linkname cobraInitializers github.com/spf13/cobra.initializers
var cobraInitializers []func()
