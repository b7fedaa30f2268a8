/* PyTorch's CUDA caching allocator, replayed in C: the rules of calculator/allocator/reference.py (reference_replay) and
 * calculator/allocator/fast.py (CachingAllocator, whose interface this type has), read from
 * c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x):
 * - a request is rounded up to 512 B (round_size); at most 1 MiB it comes from the small pool (2 MiB segments),
 *   above from the large pool (20 MiB segments below 10 MiB, the request rounded to 2 MiB above:
 *   get_allocation_size);
 * - best fit: the smallest free block that holds the request, the lowest address on ties (get_free_block over
 *   blocks ordered by size, then address); only when none does is a segment cudaMalloc'ed;
 * - a block is split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool) (should_split);
 *   a freed block merges with the free neighbours of its own segment (try_merge_blocks);
 * - expandable segments: one segment per pool whose mapped end grows in pages (2 MiB small, 20 MiB large); a request
 *   no free block holds maps what the free block at the mapped end lacks, or a new block there.
 * Reserved memory never shrinks (no empty_cache()): its peak is its final value.
 *
 * Addresses are laid out as calculator/allocator/fast.py lays them (each pool its own address space, segments at its top in
 * creation order, 512 B apart; expandable: one segment), so free_blocks() is comparable with it block for block.
 * A handle is a block's index + 1 (0: no tensor). A block's segment neighbours are its prev / next links, so a
 * merge never crosses segments. A pool's free blocks are size classes sorted by size, each a min-heap of addresses:
 * best fit is a binary search over the sizes and a heap's top (rules.h). Addresses past 2^64 B raise OverflowError
 * (no real job; the caller falls back to reference_replay). The rules are in rules.h, this file gives them
 * allocator.fast.CachingAllocator's calls. tests/allocator/test_allocator_native.py holds it equal to calculator/allocator/fast.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "rules.h"

/* ---- the Python type: allocator.fast.CachingAllocator's calls ------------------------------------------------ */

static int as_size(PyObject *o, long long *n) {
    int over = 0;
    *n = PyLong_AsLongLongAndOverflow(o, &over);
    if (over > 0) { overflow(); return -1; }
    if (over < 0) *n = 0;                              /* a negative size is no tensor */
    return (*n == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *allocs_list(Allocator *a, PyObject *sizes, int keep) {
    PyObject *seq = PySequence_Fast(sizes, "sizes must be a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = keep ? PyList_New(n) : NULL;
    if (keep && !out) { Py_DECREF(seq); return NULL; }
    for (Py_ssize_t k = 0; k < n; k++) {
        long long size;
        int64_t h;
        if (as_size(items[k], &size) < 0 || (h = alloc_one(a, size)) < 0) {
            Py_XDECREF(out); Py_DECREF(seq); return NULL;
        }
        if (keep) {
            PyObject *v = PyLong_FromLongLong(h);
            if (!v) { Py_DECREF(out); Py_DECREF(seq); return NULL; }
            PyList_SET_ITEM(out, k, v);
        }
    }
    Py_DECREF(seq);
    if (!keep) Py_RETURN_NONE;
    return out;
}

static PyObject *A_alloc(Allocator *a, PyObject *n) {
    long long size;
    int64_t h;
    if (as_size(n, &size) < 0 || (h = alloc_one(a, size)) < 0) return NULL;
    return PyLong_FromLongLong(h);
}

static PyObject *A_allocs(Allocator *a, PyObject *sizes) { return allocs_list(a, sizes, 1); }

static PyObject *A_free_one(Allocator *a, PyObject *h) {
    long long v = PyLong_AsLongLong(h);
    if ((v == -1 && PyErr_Occurred()) || free_one(a, v) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *A_frees(Allocator *a, PyObject *handles) {
    PyObject *seq = PySequence_Fast(handles, "handles must be a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        long long v = PyLong_AsLongLong(items[k]);
        if ((v == -1 && PyErr_Occurred()) || free_one(a, v) < 0) { Py_DECREF(seq); return NULL; }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* a transient: allocated and freed at once (the free merges the split back; a new segment stays, free) */
static PyObject *A_alloc_free(Allocator *a, PyObject *n) {
    long long size;
    int64_t h;
    if (as_size(n, &size) < 0 || (h = alloc_one(a, size)) < 0 || free_one(a, h) < 0) return NULL;
    Py_RETURN_NONE;
}

/* allocs_repeated(block, k, keep=True): block allocated k times in a row; each repetition's handles if keep */
static PyObject *A_allocs_repeated(Allocator *a, PyObject *args, PyObject *kw) {
    static char *names[] = {"block", "k", "keep", NULL};
    PyObject *block;
    Py_ssize_t k;
    int keep = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On|p", names, &block, &k, &keep)) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t r = 0; r < k; r++) {
        PyObject *got = allocs_list(a, block, keep);
        if (!got) { Py_DECREF(out); return NULL; }
        int bad = keep ? PyList_Append(out, got) : 0;
        Py_DECREF(got);
        if (bad < 0) { Py_DECREF(out); return NULL; }
    }
    return out;
}

/* allocs_runs(sizes, periods): sizes allocated in order, handles not kept (the periods only speed up
 * calculator/allocator/fast.py; here every request is replayed) */
static PyObject *A_allocs_runs(Allocator *a, PyObject *args) {
    PyObject *sizes, *periods;
    if (!PyArg_ParseTuple(args, "OO", &sizes, &periods)) return NULL;
    return allocs_list(a, sizes, 0);
}

static PyObject *A_totals(Allocator *a, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(KKK)", (unsigned long long)a->peak, (unsigned long long)a->reserved,
                         (unsigned long long)a->allocated);
}

/* a pool's free blocks (0 small, 1 large) as (size, address), in best-fit order, as calculator/allocator/fast.py.free_blocks */
static PyObject *A_free_blocks(Allocator *a, PyObject *pool) {
    long which = PyLong_AsLong(pool);
    if (which == -1 && PyErr_Occurred()) return NULL;
    if (which != 0 && which != 1) { PyErr_SetString(PyExc_ValueError, "pool is 0 (small) or 1 (large)"); return NULL; }
    Pool *p = &a->pools[which];
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (int32_t c = 0; c < p->n_classes; c++) {
        Class *cl = &p->classes[c];
        PyObject *pairs = PyList_New(cl->n);
        if (!pairs) { Py_DECREF(out); return NULL; }
        for (int32_t k = 0; k < cl->n; k++) {
            PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)cl->size,
                                           (unsigned long long)a->blocks[cl->heap[k]].addr);
            if (!pair) { Py_DECREF(pairs); Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(pairs, k, pair);
        }
        int bad = PyList_Sort(pairs) < 0 || PyList_SetSlice(out, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, pairs) < 0;
        Py_DECREF(pairs);
        if (bad) { Py_DECREF(out); return NULL; }
    }
    return out;
}

static void free_pools(Allocator *a) {
    for (int k = 0; k < 2; k++) {
        for (int32_t c = 0; c < a->pools[k].n_classes; c++) PyMem_Free(a->pools[k].classes[c].heap);
        PyMem_Free(a->pools[k].classes);
    }
    PyMem_Free(a->blocks); PyMem_Free(a->spare);
}

static int A_init(Allocator *a, PyObject *args, PyObject *kw) {
    static char *names[] = {"expandable", NULL};
    int expandable = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", names, &expandable)) return -1;
    free_pools(a);
    memset(&a->expandable, 0, sizeof(Allocator) - offsetof(Allocator, expandable));
    a->expandable = expandable;
    a->pools[0].tail = a->pools[1].tail = -1;
    return 0;
}

static void A_dealloc(Allocator *a) {
    free_pools(a);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyMethodDef A_methods[] = {
    {"alloc", (PyCFunction)A_alloc, METH_O, "One tensor of n bytes (0 or less: none, handle 0)."},
    {"allocs", (PyCFunction)A_allocs, METH_O, "Tensors of `sizes` bytes allocated in order; their handles."},
    {"free_one", (PyCFunction)A_free_one, METH_O, "Free a handle (0: none)."},
    {"frees", (PyCFunction)A_frees, METH_O, "Free each handle (0: none)."},
    {"alloc_free", (PyCFunction)A_alloc_free, METH_O, "A tensor of n bytes allocated and freed at once."},
    {"allocs_repeated", (PyCFunction)(void (*)(void))A_allocs_repeated, METH_VARARGS | METH_KEYWORDS,
     "`block` allocated k times in a row: each repetition's handles (none unless keep)."},
    {"allocs_runs", (PyCFunction)A_allocs_runs, METH_VARARGS, "Allocate `sizes` in order (handles not kept)."},
    {"totals", (PyCFunction)A_totals, METH_NOARGS, "(peak allocated, reserved, allocated) bytes."},
    {"free_blocks", (PyCFunction)A_free_blocks, METH_O, "A pool's free blocks as (size, address), best-fit order."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AllocatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "calculator.allocator.native._allocator.Allocator",
    .tp_basicsize = sizeof(Allocator),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PyTorch's caching allocator over byte sizes (calculator/allocator.fast.CachingAllocator's calls).",
    .tp_methods = A_methods,
    .tp_init = (initproc)A_init,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)A_dealloc,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_allocator", .m_doc = "calculator/allocator/native/allocator.c", .m_size = -1,
};

PyMODINIT_FUNC PyInit__allocator(void) {
    if (PyType_Ready(&AllocatorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&AllocatorType);
    if (PyModule_AddObject(m, "Allocator", (PyObject *)&AllocatorType) < 0) {
        Py_DECREF(&AllocatorType); Py_DECREF(m); return NULL;
    }
    return m;
}
