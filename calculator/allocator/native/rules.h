/* calculator/allocator/native/rules.h: the caching allocator's rules on plain integers (no Python objects), included by
 * allocator.c, which gives them allocator.fast.CachingAllocator's calls. The rules, their source and the layout of
 * addresses: allocator.c's opening comment. PyMem_* and PyErr_* are the only Python calls (memory, errors). */
#ifndef CALCULATOR_NATIVE_RULES_H
#define CALCULATOR_NATIVE_RULES_H
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MIN_BLOCK 512ULL                  /* kMinBlockSize */
#define SMALL_SIZE (1ULL << 20)           /* kSmallSize */
#define SMALL_BUFFER (2ULL << 20)         /* kSmallBuffer */
#define MIN_LARGE_ALLOC (10ULL << 20)     /* kMinLargeAlloc */
#define LARGE_BUFFER (20ULL << 20)        /* kLargeBuffer; the large pool's expandable page */
#define ROUND_LARGE (2ULL << 20)          /* kRoundLarge */
#define GAP MIN_BLOCK                     /* between segments, as allocator_fast.GAP */

/* a block of a segment; while free, `at` is its place in its size class's heap */
typedef struct { uint64_t addr, size; int32_t prev, next, at; uint8_t is_free, large; } Block;
/* the free blocks of one size: a binary min-heap of block indices by address */
typedef struct { uint64_t size; int32_t *heap; int32_t n; Py_ssize_t cap; } Class;
/* a pool: its size classes sorted by size (none empty), its top, and (expandable) the block at the mapped end */
typedef struct { Class *classes; int32_t n_classes, tail; Py_ssize_t cap_classes; uint64_t top; } Pool;

typedef struct {
    PyObject_HEAD
    int expandable;
    Pool pools[2];                        /* small, large */
    Block *blocks; int32_t n_blocks; Py_ssize_t cap_blocks;
    int32_t *spare; int32_t n_spare; Py_ssize_t cap_spare;   /* indices of blocks merged away, for reuse */
    uint64_t allocated, reserved, peak;
} Allocator;

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t cap2 = *cap ? *cap * 2 : 64;
    while (cap2 < need) cap2 *= 2;
    void *q = PyMem_Realloc(*p, (size_t)cap2 * item);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q; *cap = cap2;
    return 0;
}

static int32_t new_block(Allocator *a, uint64_t addr, uint64_t size, int32_t prev, int32_t next, int large) {
    int32_t i;
    if (a->n_spare) {
        i = a->spare[--a->n_spare];
    } else {
        if (a->n_blocks == INT32_MAX - 1) { PyErr_SetString(PyExc_OverflowError, "too many blocks"); return -1; }
        if (grow((void **)&a->blocks, &a->cap_blocks, (Py_ssize_t)a->n_blocks + 1, sizeof(Block)) < 0) return -1;
        i = a->n_blocks++;
    }
    Block *b = &a->blocks[i];
    b->addr = addr; b->size = size; b->prev = prev; b->next = next; b->is_free = 0; b->large = (uint8_t)large;
    return i;
}

static int drop_block(Allocator *a, int32_t i) {
    if (grow((void **)&a->spare, &a->cap_spare, (Py_ssize_t)a->n_spare + 1, sizeof(int32_t)) < 0) return -1;
    a->spare[a->n_spare++] = i;
    a->blocks[i].is_free = 1;                     /* not live: a second free of its handle is refused */
    return 0;
}

/* ---- a pool's free blocks: size classes sorted by size, each a heap by address, so best fit (get_free_block's
 * lower_bound over blocks ordered by size, then address) is the first class of at least the request, its heap's
 * top; a merge removes a neighbour from the middle of its heap (its place is kept in the block) -------------- */

static void put(Block *bs, Class *c, int32_t k, int32_t i) { c->heap[k] = i; bs[i].at = k; }

static void sift_up(Block *bs, Class *c, int32_t k) {
    int32_t i = c->heap[k];
    while (k > 0 && bs[c->heap[(k - 1) / 2]].addr > bs[i].addr) { put(bs, c, k, c->heap[(k - 1) / 2]); k = (k - 1) / 2; }
    put(bs, c, k, i);
}

static void sift_down(Block *bs, Class *c, int32_t k) {
    int32_t i = c->heap[k];
    for (;;) {
        int32_t child = 2 * k + 1;
        if (child >= c->n) break;
        if (child + 1 < c->n && bs[c->heap[child + 1]].addr < bs[c->heap[child]].addr) child++;
        if (bs[c->heap[child]].addr >= bs[i].addr) break;
        put(bs, c, k, c->heap[child]);
        k = child;
    }
    put(bs, c, k, i);
}

/* the first class of at least `size` bytes */
static int32_t class_at(const Pool *p, uint64_t size) {
    int32_t lo = 0, hi = p->n_classes;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (p->classes[mid].size < size) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void drop_class(Pool *p, int32_t c) {
    PyMem_Free(p->classes[c].heap);
    memmove(&p->classes[c], &p->classes[c + 1], (size_t)(p->n_classes - c - 1) * sizeof(Class));
    p->n_classes--;
}

/* block i out of its class's heap (its class: c) */
static void unheap(Block *bs, Pool *p, int32_t c, int32_t i) {
    Class *cl = &p->classes[c];
    int32_t k = bs[i].at, last = cl->heap[--cl->n];
    bs[i].is_free = 0;
    if (k < cl->n) {
        put(bs, cl, k, last);
        if (k > 0 && bs[cl->heap[(k - 1) / 2]].addr > bs[last].addr) sift_up(bs, cl, k); else sift_down(bs, cl, k);
    }
    if (!cl->n) drop_class(p, c);
}

static int file(Allocator *a, Pool *p, int32_t i) {
    Block *bs = a->blocks;
    int32_t c = class_at(p, bs[i].size);
    if (c == p->n_classes || p->classes[c].size != bs[i].size) {       /* a new size class */
        if (grow((void **)&p->classes, &p->cap_classes, (Py_ssize_t)p->n_classes + 1, sizeof(Class)) < 0) return -1;
        memmove(&p->classes[c + 1], &p->classes[c], (size_t)(p->n_classes - c) * sizeof(Class));
        p->n_classes++;
        p->classes[c] = (Class){bs[i].size, NULL, 0, 0};
    }
    Class *cl = &p->classes[c];
    if (grow((void **)&cl->heap, &cl->cap, (Py_ssize_t)cl->n + 1, sizeof(int32_t)) < 0) return -1;
    cl->heap[cl->n] = i;
    sift_up(bs, cl, cl->n++);
    bs[i].is_free = 1;
    return 0;
}

static void unfile(Allocator *a, Pool *p, int32_t i) {
    unheap(a->blocks, p, class_at(p, a->blocks[i].size), i);
}

/* the best fit taken from the free blocks: the first of at least `size` bytes (lowest address among equals), or
 * -1 when none holds it */
static int32_t take_best_fit(Allocator *a, Pool *p, uint64_t size) {
    int32_t c = class_at(p, size);
    if (c == p->n_classes) return -1;
    int32_t i = p->classes[c].heap[0];
    unheap(a->blocks, p, c, i);
    return i;
}

static int overflow(void) {
    PyErr_SetString(PyExc_OverflowError, "allocator addresses past 2^64 B");
    return -1;
}

/* one request of n bytes: its handle (0 for n <= 0), or -1 with an exception set */
static int64_t alloc_one(Allocator *a, long long n) {
    if (n <= 0) return 0;
    uint64_t size = (uint64_t)n < MIN_BLOCK ? MIN_BLOCK : ((uint64_t)n + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
    int large = size > SMALL_SIZE;
    Pool *p = &a->pools[large];
    int32_t i = take_best_fit(a, p, size);
    if (i >= 0) {
        /* served by a cached block */
    } else if (a->expandable) {                        /* map pages at the end */
        uint64_t page = large ? LARGE_BUFFER : SMALL_BUFFER, have = 0, g;
        int32_t t = p->tail;
        if (t >= 0 && a->blocks[t].is_free) { have = a->blocks[t].size; unfile(a, p, t); }
        g = (size - have + page - 1) / page * page;
        if (p->top + g < p->top) return overflow();
        if (t >= 0 && have) {
            i = t;
            a->blocks[i].size += g;
        } else {
            if ((i = new_block(a, p->top, g, t, -1, large)) < 0) return -1;
            if (t >= 0) a->blocks[t].next = i;
        }
        p->top += g; p->tail = i; a->reserved += g;
    } else {                                           /* cudaMalloc a segment */
        uint64_t seg = !large ? SMALL_BUFFER : size < MIN_LARGE_ALLOC ? LARGE_BUFFER
                       : (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
        if (seg < size || p->top + seg + GAP < p->top) return overflow();
        if ((i = new_block(a, p->top, seg, -1, -1, large)) < 0) return -1;
        p->top += seg + GAP; a->reserved += seg;
    }
    Block *b = &a->blocks[i];
    uint64_t rest = b->size - size;
    if (large ? rest > SMALL_SIZE : rest >= MIN_BLOCK) {   /* should_split */
        int32_t r = new_block(a, b->addr + size, rest, i, a->blocks[i].next, large);
        if (r < 0) return -1;
        b = &a->blocks[i];                             /* new_block may have moved the array */
        if (b->next >= 0) a->blocks[b->next].prev = r;
        b->next = r; b->size = size;
        if (p->tail == i) p->tail = r;
        if (file(a, p, r) < 0) return -1;
        b = &a->blocks[i];
    }
    a->allocated += b->size;
    if (a->allocated > a->peak) a->peak = a->allocated;
    return (int64_t)i + 1;
}

/* free a handle and merge it with the free neighbours of its segment */
static int free_one(Allocator *a, long long h) {
    if (h == 0) return 0;
    if (h < 0 || h > a->n_blocks || a->blocks[h - 1].is_free) {
        PyErr_Format(PyExc_ValueError, "not a live handle: %lld", h);
        return -1;
    }
    int32_t i = (int32_t)(h - 1);
    Block *b = &a->blocks[i];
    Pool *p = &a->pools[b->large];
    a->allocated -= b->size;
    int32_t nx = b->next;
    if (nx >= 0 && a->blocks[nx].is_free) {
        unfile(a, p, nx);
        b->size += a->blocks[nx].size;
        b->next = a->blocks[nx].next;
        if (b->next >= 0) a->blocks[b->next].prev = i;
        if (p->tail == nx) p->tail = i;
        if (drop_block(a, nx) < 0) return -1;
    }
    int32_t pv = b->prev;
    if (pv >= 0 && a->blocks[pv].is_free) {
        Block *q = &a->blocks[pv];
        unfile(a, p, pv);
        q->size += b->size;
        q->next = b->next;
        if (q->next >= 0) a->blocks[q->next].prev = pv;
        if (p->tail == i) p->tail = pv;
        if (drop_block(a, i) < 0) return -1;
        i = pv;
    }
    return file(a, p, i);
}

#endif
