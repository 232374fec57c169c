// An empty assembly file lets lookup.go declare, without a body, functions of Helm that
// go:linkname binds.
