// tutorial_settings.h: the settings header of a tutorial's kernels.cl, as such tutorials keep
// it (written for gemmlab's examples in the style of myGEMM's settings.h): the kernel to build
// and its tile sizes are fixed here with plain #defines, beside function-like helpers that the
// kernels need. gemmlab compiles it unchanged: the YAML's KERNEL, TSM, ... win over the values
// below (docs/adding-a-kernel.md, "A tutorial's settings header").

// Select a kernel
#define KERNEL 8

// Tile sizes for kernels 7 and 8
#define TSM 128                      // the tile size in dimension M
#define TSN 128                      // the tile size in dimension N
#define WPTM 8                       // work per thread in dimension M
#define WPTN 8                       // work per thread in dimension N
#define RTSM (TSM/WPTM)              // the reduced tile size in M (== work-items along M)
#define RTSN (TSN/WPTN)              // the reduced tile size in N (== work-items along N)

// Macros for host and kernel code
#define CEIL_DIV(x,y) (((x) + (y) - 1) / (y))
#define MOD2(x,y) ((x) % (y))
#define DIV2(x,y) ((x) / (y))
