module cloudloop.invalid/gotools/govmomi

go 1.23

tool github.com/vmware/govmomi/vcsim

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/vmware/govmomi v0.46.3 // indirect
)
