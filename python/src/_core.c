/*
 * optitpu._core: the CPython extension behind the optitpu package, over the public C API only
 * (the headers in include/optitpu), against the stable ABI of CPython 3.11 (Py_LIMITED_API
 * 0x030B0000, the first version whose limited API has the buffer protocol).
 *
 * Arrays: arguments are taken without copies from the buffer protocol (NumPy, memoryview, array),
 * from __dlpack__ (PyTorch and JAX CPU arrays) or from optitpu.Array; outputs are optitpu.Array
 * objects owning 64-byte aligned host memory that export it through the buffer protocol and
 * __dlpack__ (np.asarray, torch.from_dlpack, jax.numpy.from_dlpack take it without a copy).
 *
 * Errors: every failure is an optitpu.Error subclass named after the C status (InvalidArgument,
 * ShapeMismatch, ...), carrying the library's "CODE: detail" message; nothing a caller passes
 * may crash the interpreter (every argument is checked before any pointer is used).
 *
 * Threads: the GIL is released during parsing, compiling and running. An executable may run from
 * several threads at once (each run takes its own arena); closing it while a run is in progress
 * is FailedPrecondition.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <optitpu/optitpu.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

/* ---- errors ------------------------------------------------------------------------------- */

#define NSTATUS (-OT_STATUS_MIN + 1)
static PyObject *g_error;           /* optitpu.Error */
static PyObject *g_errors[NSTATUS]; /* by -status; [0] unused */
static PyTypeObject *g_array_type;  /* optitpu.Array */
static PyTypeObject *g_exe_type;    /* optitpu.Executable */

static PyObject *error_class(ot_status s) {
    if (s < OT_STATUS_MIN || s >= 0 || !g_errors[-s]) return g_error;
    return g_errors[-s];
}

/* Raises the library's last error for status s; returns NULL for `return raise_status(s);`. */
static PyObject *raise_status(ot_status s) {
    const char *msg = ot_last_error();
    if (!msg || !*msg) msg = ot_status_str(s);
    PyErr_SetString(error_class(s), msg);
    return NULL;
}

/* Raises s with a message of the binding's own, in the library's "CODE: detail" form. */
static PyObject *raise_fmt(ot_status s, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    PyErr_Format(error_class(s), "%s: %s", ot_status_str(s), buf);
    return NULL;
}

/* The exceptions: optitpu.Error, and one subclass per status, also deriving from the builtin
 * exception Python code would expect (InvalidArgument is a ValueError, IO an OSError, ...). */
static int make_errors(PyObject *mod) {
    g_error = PyErr_NewExceptionWithDoc(
        "optitpu.Error", "An optitpu call failed; .status is the C status name.", NULL, NULL);
    if (!g_error || PyModule_AddObjectRef(mod, "Error", g_error) < 0) return -1;
    PyObject *st = PyUnicode_FromString("UNKNOWN");
    if (!st || PyObject_SetAttrString(g_error, "status", st) < 0) return -1;
    Py_DECREF(st);
    for (int k = 1; k < NSTATUS; k++) {
        ot_status s = (ot_status)-k;
        const char *code = ot_status_str(s);
        char camel[64] = "optitpu.", *w = camel + 8;
        bool up = true;
        for (const char *c = code; *c && w < camel + sizeof camel - 1; c++) {
            if (*c == '_') {
                up = true;
                continue;
            }
            *w++ = up ? *c : (char)(*c - 'A' + 'a');
            up = false;
        }
        *w = 0;
        if (s == OT_ERR_IO) strcpy(camel + 8, "IOError"); /* "Io" reads badly */
        PyObject *extra = NULL;
        switch (s) {
        case OT_ERR_INVALID_ARGUMENT:
        case OT_ERR_SHAPE_MISMATCH:
        case OT_ERR_CORRUPT_DATA: extra = PyExc_ValueError; break;
        case OT_ERR_OUT_OF_MEMORY:
        case OT_ERR_RESOURCE_EXHAUSTED: extra = PyExc_MemoryError; break;
        case OT_ERR_NOT_FOUND: extra = PyExc_LookupError; break;
        case OT_ERR_IO: extra = PyExc_OSError; break;
        case OT_ERR_TIMEOUT: extra = PyExc_TimeoutError; break;
        case OT_ERR_UNIMPLEMENTED: extra = PyExc_NotImplementedError; break;
        case OT_ERR_OUT_OF_RANGE: extra = PyExc_IndexError; break;
        default: break;
        }
        PyObject *bases = extra ? PyTuple_Pack(2, g_error, extra) : PyTuple_Pack(1, g_error);
        if (!bases) return -1;
        PyObject *cls = PyErr_NewException(camel, bases, NULL);
        Py_DECREF(bases);
        if (!cls) return -1;
        PyObject *sname = PyUnicode_FromString(code);
        if (!sname || PyObject_SetAttrString(cls, "status", sname) < 0) return -1;
        Py_DECREF(sname);
        g_errors[k] = cls;
        if (PyModule_AddObjectRef(mod, camel + 8, cls) < 0) return -1;
    }
    return 0;
}

/* ---- dtypes ------------------------------------------------------------------------------- */

/* PEP 3118 format of each dtype (bf16 has none: it is exported through __dlpack__ and, for
 * NumPy, as ml_dtypes.bfloat16 by the Python layer). */
static const char *buffer_format(ot_dtype t) {
    switch (t) {
    case OT_PRED: return "?";
    case OT_S8: return "b";
    case OT_S16: return "h";
    case OT_S32: return "i";
    case OT_S64: return "q";
    case OT_U8: return "B";
    case OT_U16: return "H";
    case OT_U32: return "I";
    case OT_U64: return "Q";
    case OT_F16: return "e";
    case OT_F32: return "f";
    case OT_F64: return "d";
    default: return NULL;
    }
}

/* A buffer's format (native or little-endian byte order; this library runs on little-endian
 * hosts) and item size to a dtype; OT_DTYPE_INVALID when there is none. */
static ot_dtype dtype_of_format(const char *f, Py_ssize_t itemsize) {
    if (!f) return itemsize == 1 ? OT_U8 : OT_DTYPE_INVALID;
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (!f[0] || f[1]) return OT_DTYPE_INVALID;
    bool sgn = false, flt = false;
    switch (f[0]) {
    case '?': return itemsize == 1 ? OT_PRED : OT_DTYPE_INVALID;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n': sgn = true; break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N': break;
    case 'e':
    case 'f':
    case 'd': flt = true; break;
    default: return OT_DTYPE_INVALID;
    }
    if (flt)
        return itemsize == 2   ? OT_F16
               : itemsize == 4 ? OT_F32
               : itemsize == 8 ? OT_F64
                               : OT_DTYPE_INVALID;
    switch (itemsize) {
    case 1: return sgn ? OT_S8 : OT_U8;
    case 2: return sgn ? OT_S16 : OT_U16;
    case 4: return sgn ? OT_S32 : OT_U32;
    case 8: return sgn ? OT_S64 : OT_U64;
    default: return OT_DTYPE_INVALID;
    }
}

static ot_dtype dtype_of_dl(DLDataType t) {
    if (t.lanes != 1) return OT_DTYPE_INVALID;
    switch (t.code) {
    case kDLBool: return t.bits == 8 ? OT_PRED : OT_DTYPE_INVALID;
    case kDLInt:
        return t.bits == 8    ? OT_S8
               : t.bits == 16 ? OT_S16
               : t.bits == 32 ? OT_S32
               : t.bits == 64 ? OT_S64
                              : OT_DTYPE_INVALID;
    case kDLUInt:
        return t.bits == 8    ? OT_U8
               : t.bits == 16 ? OT_U16
               : t.bits == 32 ? OT_U32
               : t.bits == 64 ? OT_U64
                              : OT_DTYPE_INVALID;
    case kDLFloat:
        return t.bits == 16   ? OT_F16
               : t.bits == 32 ? OT_F32
               : t.bits == 64 ? OT_F64
                              : OT_DTYPE_INVALID;
    case kDLBfloat: return t.bits == 16 ? OT_BF16 : OT_DTYPE_INVALID;
    default: return OT_DTYPE_INVALID;
    }
}

static DLDataType dl_of_dtype(ot_dtype t) {
    DLDataType d = {kDLFloat, (uint8_t)(ot_dtype_size(t) * 8), 1};
    if (t == OT_PRED)
        d.code = kDLBool;
    else if (t == OT_BF16)
        d.code = kDLBfloat;
    else if (ot_dtype_is_signed_int(t))
        d.code = kDLInt;
    else if (ot_dtype_is_unsigned_int(t))
        d.code = kDLUInt;
    return d;
}

static PyObject *shape_tuple(const ot_shape *s) {
    PyObject *t = PyTuple_New(s->rank);
    if (!t) return NULL;
    for (int k = 0; k < s->rank; k++) {
        PyObject *d = PyLong_FromLongLong(s->dims[k]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, k, d);
    }
    return t;
}

static void shape_str(const ot_shape *s, char *buf, size_t n) {
    ot_shape_format(s, buf, n);
}

/* ---- optitpu.Array ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD ot_shape shape;
    void *data;     /* ot_aligned_alloc(64), owned; or base's memory */
    PyObject *base; /* NULL, or the array whose memory this view shares (Array.view) */
    int64_t nbytes;
    Py_ssize_t pshape[OT_MAX_RANK], pstrides[OT_MAX_RANK];
} ArrayObject;

/* A new array of shape s with uninitialized memory (zero bytes get a valid 64-byte block). */
static ArrayObject *array_new_in(const ot_shape *s, bool stream) {
    int64_t nb = ot_shape_nbytes_unchecked(s);
    void *mem = stream ? ot_stream_alloc((size_t)(nb > 0 ? nb : OT_ALIGNMENT))
                       : ot_aligned_alloc(OT_ALIGNMENT, (size_t)(nb > 0 ? nb : OT_ALIGNMENT));
    if (!mem) {
        PyErr_NoMemory();
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(g_array_type, Py_tp_alloc);
    ArrayObject *a = (ArrayObject *)alloc(g_array_type, 0);
    if (!a) {
        ot_aligned_free(mem);
        return NULL;
    }
    a->shape = *s;
    a->data = mem;
    a->base = NULL;
    a->nbytes = nb;
    Py_ssize_t stride = (Py_ssize_t)ot_dtype_size(s->dtype);
    for (int k = s->rank - 1; k >= 0; k--) {
        a->pshape[k] = (Py_ssize_t)s->dims[k];
        a->pstrides[k] = stride;
        stride *= (Py_ssize_t)s->dims[k];
    }
    return a;
}

static ArrayObject *array_new(const ot_shape *s) {
    return array_new_in(s, false);
}

static void array_dealloc(PyObject *self) {
    ArrayObject *a = (ArrayObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (a->base)
        Py_DECREF(a->base);
    else
        ot_aligned_free(a->data);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static int array_getbuffer(PyObject *self, Py_buffer *v, int flags) {
    ArrayObject *a = (ArrayObject *)self;
    const char *fmt = buffer_format(a->shape.dtype);
    if (!(flags & PyBUF_ND)) /* plain bytes: what np.frombuffer asks for (bf16's path) */
        return PyBuffer_FillInfo(v, self, a->data, (Py_ssize_t)a->nbytes, 0, flags);
    if (!fmt) {
        PyErr_SetString(PyExc_BufferError,
                        "optitpu.Array: bf16 has no buffer-protocol format; use np.asarray "
                        "(ml_dtypes.bfloat16) or __dlpack__");
        return -1;
    }
    int64_t numel = ot_shape_numel_unchecked(&a->shape);
    int nonunit = 0;
    for (int k = 0; k < a->shape.rank; k++) nonunit += a->shape.dims[k] > 1;
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && nonunit > 1 && numel > 1) {
        PyErr_SetString(PyExc_BufferError, "optitpu.Array is row-major (C contiguous)");
        return -1;
    }
    v->buf = a->data;
    v->obj = Py_NewRef(self);
    v->len = (Py_ssize_t)a->nbytes;
    v->readonly = 0;
    v->itemsize = (Py_ssize_t)ot_dtype_size(a->shape.dtype);
    v->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    v->ndim = a->shape.rank;
    v->shape = a->shape.rank ? a->pshape : NULL;
    v->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES && a->shape.rank ? a->pstrides : NULL;
    v->suboffsets = NULL;
    v->internal = NULL;
    return 0;
}

static void array_releasebuffer(PyObject *self, Py_buffer *v) {
    (void)self;
    (void)v;
}

/* __dlpack__: a "dltensor" capsule whose manager context holds a reference to the array. */
typedef struct {
    DLManagedTensor mt;
    PyObject *owner;
    int64_t shape[OT_MAX_RANK], strides[OT_MAX_RANK];
} dl_export;

static void dl_export_deleter(DLManagedTensor *mt) {
    /* consumers may call this from any thread, with or without the GIL */
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(((dl_export *)mt)->owner);
    PyGILState_Release(g);
    free(mt);
}

static void dl_capsule_destructor(PyObject *cap) {
    /* never consumed: the producer frees it (a consumer renames it "used_dltensor") */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
        if (mt && mt->deleter) mt->deleter(mt);
    } else {
        PyErr_Clear();
    }
}

static PyObject *array_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO", kwlist, &stream, &maxv, &dev, &copy))
        return NULL;
    if (stream != Py_None) {
        /* CPU memory: the array API standard asks producers to refuse a stream */
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "__dlpack__: a CPU array takes no stream");
    }
    if (copy == Py_True)
        return raise_fmt(OT_ERR_UNIMPLEMENTED, "__dlpack__(copy=True): export shares memory");
    ArrayObject *a = (ArrayObject *)self;
    dl_export *e = calloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    e->owner = Py_NewRef(self);
    int64_t stride = 1;
    for (int k = a->shape.rank - 1; k >= 0; k--) {
        e->shape[k] = a->shape.dims[k];
        e->strides[k] = stride;
        stride *= a->shape.dims[k];
    }
    DLTensor *t = &e->mt.dl_tensor;
    t->data = a->data;
    t->device = (DLDevice){kDLCPU, 0};
    t->ndim = a->shape.rank;
    t->dtype = dl_of_dtype(a->shape.dtype);
    t->shape = e->shape;
    t->strides = e->strides;
    t->byte_offset = 0;
    e->mt.manager_ctx = e;
    e->mt.deleter = dl_export_deleter;
    PyObject *cap = PyCapsule_New(&e->mt, "dltensor", dl_capsule_destructor);
    if (!cap) {
        Py_DECREF(self);
        free(e);
    }
    return cap;
}

/* Array.view(dtype): the same memory read as another dtype of the same size (bf16 <-> u16). */
static PyObject *array_view(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    ArrayObject *a = (ArrayObject *)self;
    ot_dtype t = ot_dtype_from_name(name, strlen(name));
    if (t == OT_DTYPE_INVALID || ot_dtype_size(t) != ot_dtype_size(a->shape.dtype))
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "view: '%s' is not a dtype of %zu bytes", name,
                         ot_dtype_size(a->shape.dtype));
    allocfunc alloc = (allocfunc)PyType_GetSlot(g_array_type, Py_tp_alloc);
    ArrayObject *v = (ArrayObject *)alloc(g_array_type, 0);
    if (!v) return NULL;
    v->shape = a->shape;
    v->shape.dtype = t;
    v->data = a->data;
    v->base = Py_NewRef(a->base ? a->base : self);
    v->nbytes = a->nbytes;
    memcpy(v->pshape, a->pshape, sizeof v->pshape);
    memcpy(v->pstrides, a->pstrides, sizeof v->pstrides);
    return (PyObject *)v;
}

static PyObject *array_dlpack_device(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", kDLCPU, 0);
}

static PyObject *array_get_shape(PyObject *self, void *c) {
    (void)c;
    return shape_tuple(&((ArrayObject *)self)->shape);
}
static PyObject *array_get_dtype(PyObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(ot_dtype_name(((ArrayObject *)self)->shape.dtype));
}
static PyObject *array_get_nbytes(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLongLong(((ArrayObject *)self)->nbytes);
}
static PyObject *array_get_ndim(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(((ArrayObject *)self)->shape.rank);
}
static PyObject *array_get_ptr(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromVoidPtr(((ArrayObject *)self)->data);
}

static PyObject *array_repr(PyObject *self) {
    char s[160];
    shape_str(&((ArrayObject *)self)->shape, s, sizeof s);
    return PyUnicode_FromFormat("optitpu.Array(%s)", s);
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack capsule sharing the array's memory (CPU)."},
    {"__dlpack_device__", array_dlpack_device, METH_NOARGS, "(kDLCPU, 0)"},
    {"view", array_view, METH_VARARGS, "view(dtype): the same memory as another dtype of its size"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef array_getset[] = {
    {"shape", array_get_shape, NULL, "dimensions", NULL},
    {"dtype", array_get_dtype, NULL, "HLO element type name: 'f32', 'bf16', ...", NULL},
    {"nbytes", array_get_nbytes, NULL, "bytes of data", NULL},
    {"ndim", array_get_ndim, NULL, "rank", NULL},
    {"data_ptr", array_get_ptr, NULL, "address of the first element", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot array_slots[] = {
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_repr, array_repr},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {Py_bf_getbuffer, array_getbuffer},
    {Py_bf_releasebuffer, array_releasebuffer},
    {Py_tp_doc, "An array produced by optitpu: row-major host memory, 64-byte aligned, shared "
                "with NumPy (buffer protocol) and PyTorch/JAX (__dlpack__) without copies."},
    {0, NULL},
};

/* Only the library makes arrays and executables (an empty one would hold no memory). */
static PyType_Spec array_spec = {"optitpu.Array", sizeof(ArrayObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                 array_slots};

/* ---- argument views ------------------------------------------------------------------------ */

enum { VIEW_NONE, VIEW_ARRAY, VIEW_BUFFER, VIEW_DLPACK, VIEW_TEMP };

typedef struct {
    int kind;
    void *data;
    ot_shape shape;
    bool readonly;
    Py_buffer buf;
    PyObject *capsule;
    DLManagedTensor *mt;
    PyObject *keep; /* an object made on the way (a bf16 array's uint16 view) */
} argview;

static void view_release(argview *v) {
    switch (v->kind) {
    case VIEW_BUFFER: PyBuffer_Release(&v->buf); break;
    case VIEW_DLPACK:
        if (v->mt && v->mt->deleter) v->mt->deleter(v->mt);
        Py_XDECREF(v->capsule);
        break;
    case VIEW_TEMP: ot_aligned_free(v->data); break;
    default: break;
    }
    Py_XDECREF(v->keep);
    v->kind = VIEW_NONE;
    v->keep = NULL;
}

static int shape_from(ot_shape *s, ot_dtype dt, int rank, const int64_t *dims, int argno) {
    if (rank > OT_MAX_RANK) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d has rank %d; at most %d", argno, rank,
                  OT_MAX_RANK);
        return -1;
    }
    if (ot_shape_make(s, dt, rank, dims) != OT_OK) {
        raise_status(OT_ERR_INVALID_ARGUMENT);
        return -1;
    }
    return 0;
}

/* Moves a misaligned buffer into aligned memory (a view into a bytes object at an odd offset). */
static int view_align(argview *v) {
    size_t es = ot_dtype_size(v->shape.dtype);
    if (((uintptr_t)v->data % es) == 0) return 0;
    int64_t nb = ot_shape_nbytes_unchecked(&v->shape);
    void *mem = ot_aligned_alloc(OT_ALIGNMENT, (size_t)(nb > 0 ? nb : 1));
    if (!mem) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(mem, v->data, (size_t)nb);
    ot_shape s = v->shape;
    view_release(v);
    v->kind = VIEW_TEMP;
    v->data = mem;
    v->shape = s;
    v->readonly = true; /* a copy: writing it would not reach the caller */
    return 0;
}

static int view_from_buffer(PyObject *o, argview *v, int argno, ot_dtype force) {
    if (PyObject_GetBuffer(o, &v->buf, PyBUF_RECORDS_RO) < 0) return 1; /* not this way */
    v->kind = VIEW_BUFFER;
    if (!PyBuffer_IsContiguous(&v->buf, 'C')) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "argument %d is not C-contiguous (row-major); pass a contiguous copy "
                  "(np.ascontiguousarray, tensor.contiguous())",
                  argno);
        return -1;
    }
    ot_dtype dt =
        force != OT_DTYPE_INVALID ? force : dtype_of_format(v->buf.format, v->buf.itemsize);
    if (dt == OT_DTYPE_INVALID || ot_dtype_size(dt) != (size_t)v->buf.itemsize) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d: buffer format '%s' has no optitpu dtype",
                  argno, v->buf.format ? v->buf.format : "B");
        return -1;
    }
    int64_t dims[OT_MAX_RANK];
    if (v->buf.ndim > OT_MAX_RANK) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d has rank %d; at most %d", argno,
                  v->buf.ndim, OT_MAX_RANK);
        return -1;
    }
    for (int k = 0; k < v->buf.ndim; k++) dims[k] = v->buf.shape[k];
    if (shape_from(&v->shape, dt, v->buf.ndim, dims, argno) < 0) return -1;
    v->data = v->buf.buf;
    v->readonly = v->buf.readonly != 0;
    return view_align(v);
}

static int view_from_dlpack(PyObject *o, argview *v, int argno) {
    PyObject *cap = PyObject_CallMethod(o, "__dlpack__", NULL);
    if (!cap) {
        /* keep the producer's reason (e.g. torch: a tensor that requires grad) */
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyObject *s = val ? PyObject_Str(val) : NULL;
        const char *m = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
        PyErr_Clear();
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d: __dlpack__ failed: %s", argno,
                  m ? m : "?");
        Py_XDECREF(s);
        Py_XDECREF(type);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return -1;
    }
    if (!PyCapsule_IsValid(cap, "dltensor")) {
        Py_DECREF(cap);
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "argument %d: __dlpack__ did not return a DLPack capsule", argno);
        return -1;
    }
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
    /* from here the capsule is ours: renamed so its destructor leaves the tensor to us */
    if (!mt || PyCapsule_SetName(cap, "used_dltensor") < 0) {
        Py_DECREF(cap);
        return -1;
    }
    v->kind = VIEW_DLPACK;
    v->capsule = cap;
    v->mt = mt;
    DLTensor *t = &mt->dl_tensor;
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "argument %d lives on DLPack device type %d; optitpu takes host (CPU) memory",
                  argno, t->device.device_type);
        return -1;
    }
    ot_dtype dt = dtype_of_dl(t->dtype);
    if (dt == OT_DTYPE_INVALID) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "argument %d: DLPack dtype (code %d, %d bits, %d lanes) has no optitpu dtype",
                  argno, t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return -1;
    }
    if (t->ndim < 0 || t->ndim > OT_MAX_RANK) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d has rank %d; at most %d", argno, t->ndim,
                  OT_MAX_RANK);
        return -1;
    }
    if (t->ndim > 0 && !t->shape) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d: DLPack tensor without a shape", argno);
        return -1;
    }
    if (shape_from(&v->shape, dt, t->ndim, t->shape, argno) < 0) return -1;
    if (t->strides && ot_shape_numel_unchecked(&v->shape) > 1) {
        int64_t expect = 1;
        for (int k = t->ndim - 1; k >= 0; k--) {
            if (t->shape[k] != 1 && t->strides[k] != expect) {
                raise_fmt(OT_ERR_INVALID_ARGUMENT,
                          "argument %d is not C-contiguous (row-major); pass a contiguous copy "
                          "(tensor.contiguous())",
                          argno);
                return -1;
            }
            expect *= t->shape[k];
        }
    }
    v->data = (char *)t->data + t->byte_offset;
    v->readonly = false; /* DLPack < 1.0 has no read-only flag */
    return view_align(v);
}

/* A Python number for a scalar parameter of dtype dt. */
static int view_from_number(PyObject *o, argview *v, ot_dtype dt, int argno) {
    size_t es = ot_dtype_size(dt);
    void *mem = ot_aligned_alloc(OT_ALIGNMENT, OT_ALIGNMENT);
    if (!mem) {
        PyErr_NoMemory();
        return -1;
    }
    v->kind = VIEW_TEMP;
    v->data = mem;
    v->shape = ot_shape_scalar(dt);
    v->readonly = true;
    if (ot_dtype_is_float(dt)) {
        double d = PyFloat_AsDouble(o);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        if (dt == OT_F64)
            memcpy(mem, &d, 8);
        else {
            float f = (float)d;
            uint16_t h = dt == OT_F16 ? ot_f32_to_f16(f) : ot_f32_to_bf16(f);
            if (dt == OT_F32)
                memcpy(mem, &f, 4);
            else
                memcpy(mem, &h, 2);
        }
        return 0;
    }
    int over = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &over);
    if (x == -1 && PyErr_Occurred()) return -1;
    unsigned long long ux = (unsigned long long)x;
    bool ok = !over;
    switch (dt) {
    case OT_PRED: ok = ok && (x == 0 || x == 1); break;
    case OT_S8: ok = ok && x >= INT8_MIN && x <= INT8_MAX; break;
    case OT_S16: ok = ok && x >= INT16_MIN && x <= INT16_MAX; break;
    case OT_S32: ok = ok && x >= INT32_MIN && x <= INT32_MAX; break;
    case OT_S64: break;
    case OT_U8: ok = ok && x >= 0 && x <= UINT8_MAX; break;
    case OT_U16: ok = ok && x >= 0 && x <= UINT16_MAX; break;
    case OT_U32: ok = ok && x >= 0 && x <= (long long)UINT32_MAX; break;
    case OT_U64:
        if (over > 0) {
            ux = PyLong_AsUnsignedLongLong(o);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                ok = false;
            } else
                ok = true;
        } else
            ok = ok && x >= 0;
        break;
    default: ok = false;
    }
    if (!ok)
        return raise_fmt(OT_ERR_OUT_OF_RANGE, "argument %d: %s does not fit %s", argno, "value",
                         ot_dtype_name(dt)),
               -1;
    /* little-endian: the low bytes of the 64-bit value are the narrower integer */
    memcpy(mem, &ux, es);
    return 0;
}

static bool has_attr(PyObject *o, const char *name) {
    int r = PyObject_HasAttrString(o, name);
    return r > 0;
}

/* Any array-like to a view without copying. `want` (may be NULL) is the parameter's shape, used
 * for Python numbers. Returns 0, or -1 with an exception set (the view released). */
static int view_from_obj(PyObject *o, argview *v, const ot_shape *want, int argno) {
    memset(v, 0, sizeof *v);
    if (PyObject_TypeCheck(o, g_array_type)) {
        ArrayObject *a = (ArrayObject *)o;
        v->kind = VIEW_ARRAY;
        v->data = a->data;
        v->shape = a->shape;
        return 0;
    }
    if (want && want->rank == 0 &&
        (PyFloat_Check(o) || PyLong_Check(o))) { /* bool is an int subclass */
        if (view_from_number(o, v, want->dtype, argno) < 0) goto fail;
        return 0;
    }
    if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyUnicode_Check(o)) {
        int r = view_from_buffer(o, v, argno, OT_DTYPE_INVALID);
        if (r < 0) goto fail;
        if (r == 0) return 0;
        /* no buffer with a format: NumPy's bf16 (ml_dtypes), read through its uint16 view */
        PyErr_Clear();
        PyObject *dt = PyObject_GetAttrString(o, "dtype");
        PyObject *name = dt ? PyObject_GetAttrString(dt, "name") : NULL;
        Py_XDECREF(dt);
        const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
        bool bf16 = n && strcmp(n, "bfloat16") == 0;
        Py_XDECREF(name);
        PyErr_Clear();
        if (bf16) {
            PyObject *u16 = PyObject_CallMethod(o, "view", "s", "uint16");
            if (!u16) goto fail;
            r = view_from_buffer(u16, v, argno, OT_BF16);
            v->keep = u16;
            if (r != 0) {
                if (r > 0)
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "argument %d: no buffer for bf16 data",
                              argno);
                goto fail;
            }
            return 0;
        }
    }
    if (has_attr(o, "__dlpack__")) {
        if (view_from_dlpack(o, v, argno) < 0) goto fail;
        return 0;
    }
    {
        PyObject *tn = PyType_GetName(Py_TYPE(o));
        const char *s = tn ? PyUnicode_AsUTF8AndSize(tn, NULL) : "?";
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "argument %d: a %s is not an array (buffer protocol or __dlpack__)%s", argno,
                  s ? s : "?", want && want->rank == 0 ? " or a number" : "");
        Py_XDECREF(tn);
    }
fail:
    view_release(v);
    return -1;
}

/* ---- optitpu.Executable --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD ot_executable *exe; /* owned unless `owner` owns it */
    ot_tpu_optimizer *tpu;            /* an optimizer update: owns exe */
    ot_profile *prof;                 /* NULL unless compiled with profile=True */
    _Atomic(void *) arena; /* one cached arena (each concurrent run beyond it allocates) */
    atomic_int running;    /* runs in progress (close refuses meanwhile) */
    int nparams, nouts;
    ot_shape *pshape, *oshape;
    int *alias;    /* per output: the donated parameter it writes, or -1 */
    bool *donated; /* per parameter: some output is written into it */
    int64_t arena_size;
    bool tuple_root;
} ExeObject;

static void exe_release(ExeObject *e) {
    if (e->tpu)
        ot_tpu_optimizer_free(e->tpu);
    else
        ot_executable_free(e->exe);
    e->tpu = NULL;
    e->exe = NULL;
    ot_profile_free(e->prof);
    e->prof = NULL;
    ot_aligned_free(atomic_exchange(&e->arena, NULL));
    free(e->pshape);
    free(e->oshape);
    free(e->alias);
    free(e->donated);
    e->pshape = e->oshape = NULL;
    e->alias = NULL;
    e->donated = NULL;
}

static void exe_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    exe_release((ExeObject *)self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* Wraps a compiled executable (taken over, also on failure). */
static PyObject *exe_wrap(ot_executable *exe, ot_tpu_optimizer *tpu, ot_profile *prof) {
    allocfunc alloc = (allocfunc)PyType_GetSlot(g_exe_type, Py_tp_alloc);
    ExeObject *e = (ExeObject *)alloc(g_exe_type, 0);
    if (!e) {
        if (tpu)
            ot_tpu_optimizer_free(tpu);
        else
            ot_executable_free(exe);
        ot_profile_free(prof);
        return NULL;
    }
    e->exe = exe;
    e->tpu = tpu;
    e->prof = prof;
    atomic_init(&e->arena, NULL);
    atomic_init(&e->running, 0);
    e->nparams = ot_executable_param_count(exe);
    e->nouts = ot_executable_output_count(exe);
    e->arena_size = ot_executable_arena_size(exe);
    e->pshape = calloc((size_t)e->nparams + 1, sizeof(ot_shape));
    e->oshape = calloc((size_t)e->nouts + 1, sizeof(ot_shape));
    e->alias = calloc((size_t)e->nouts + 1, sizeof(int));
    e->donated = calloc((size_t)e->nparams + 1, sizeof(bool));
    if (!e->pshape || !e->oshape || !e->alias || !e->donated) {
        Py_DECREF(e);
        return PyErr_NoMemory();
    }
    for (int k = 0; k < e->nparams; k++)
        e->pshape[k] = ot_executable_slot(exe, ot_executable_param_slot(exe, k))->shape;
    for (int k = 0; k < e->nouts; k++) {
        const ot_slot *s = ot_executable_slot(exe, ot_executable_output_slot(exe, k));
        e->oshape[k] = s->shape;
        e->alias[k] = (int)s->alias_param;
        if (s->alias_param >= 0 && s->alias_param < e->nparams) e->donated[s->alias_param] = true;
    }
    const ot_module *m = ot_executable_module(exe);
    const ot_computation *entry = ot_module_entry(m);
    e->tuple_root = entry && entry->root && entry->root->shape.kind == OT_IR_TUPLE;
    return (PyObject *)e;
}

static int exe_live(ExeObject *e) {
    if (!e->exe) {
        raise_fmt(OT_ERR_FAILED_PRECONDITION, "the executable was closed");
        return -1;
    }
    return 0;
}

#define MAX_ARGS 4096

typedef struct {
    uintptr_t lo, hi;
    int param;
    bool donated;
} mem_range;

static int range_cmp(const void *a, const void *b) {
    const mem_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* With donate=True an output is written where a parameter lies: that memory must not be another
 * argument's too (the same array twice, or views of one buffer), which the compiled kernels
 * would read while writing it. Sorted by start, so n log n for the optimizers' hundreds of
 * arguments. 0, or -1 with InvalidArgument naming both parameters. */
static int donated_overlap(const ExeObject *e, const argview *v, int n) {
    bool any = false;
    for (int k = 0; k < e->nouts; k++) any |= e->alias[k] >= 0;
    if (!any) return 0;
    mem_range st[16], *r = n <= 16 ? st : calloc((size_t)n, sizeof *r);
    if (!r) {
        PyErr_NoMemory();
        return -1;
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        int64_t nb = ot_shape_nbytes_unchecked(&v[k].shape);
        if (nb > 0)
            r[m++] = (mem_range){(uintptr_t)v[k].data, (uintptr_t)v[k].data + (uintptr_t)nb, k,
                                 e->donated[k]};
    }
    qsort(r, (size_t)m, sizeof *r, range_cmp);
    int rc = 0;
    /* an overlap of a donated range with any other shows between neighbours in start order, or
     * with the range of largest end seen so far */
    int far = -1;
    for (int q = 0; q < m && rc == 0; q++) {
        if (far >= 0 && r[q].lo < r[far].hi && (r[q].donated || r[far].donated)) {
            int a = r[far].param < r[q].param ? r[far].param : r[q].param;
            int b = r[far].param < r[q].param ? r[q].param : r[far].param;
            raise_fmt(OT_ERR_INVALID_ARGUMENT,
                      "parameters %d and %d share memory and one of them is donated "
                      "(donate=True writes it)",
                      a, b);
            rc = -1;
        }
        if (far < 0 || r[q].hi > r[far].hi || (r[q].hi == r[far].hi && r[q].donated)) far = q;
    }
    if (r != st) free(r);
    return rc;
}

static PyObject *exe_call_devices(ExeObject *e, PyObject *args, PyObject *devices);

static PyObject *exe_call(PyObject *self, PyObject *args, PyObject *kw) {
    ExeObject *e = (ExeObject *)self;
    int donate = 0;
    PyObject *devices = NULL;
    if (kw) {
        PyObject *d = PyDict_GetItemString(kw, "donate");
        devices = PyDict_GetItemString(kw, "devices");
        if (devices == Py_None) devices = NULL;
        Py_ssize_t nkw = PyDict_Size(kw);
        if (nkw != (d != NULL) + (PyDict_GetItemString(kw, "devices") != NULL))
            return raise_fmt(OT_ERR_INVALID_ARGUMENT,
                             "an executable takes arrays, donate= and devices=");
        if (d && (donate = PyObject_IsTrue(d)) < 0) return NULL;
    }
    if (exe_live(e) < 0) return NULL;
    if (devices) {
        if (donate)
            return raise_fmt(OT_ERR_INVALID_ARGUMENT,
                             "donate=True does not apply with devices= (each device's outputs "
                             "are new arrays)");
        return exe_call_devices(e, args, devices);
    }
    Py_ssize_t n = PyTuple_Size(args);
    if (n != e->nparams)
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "the executable takes %d arrays, got %zd",
                         e->nparams, n);
    if (n > MAX_ARGS || e->nouts > MAX_ARGS)
        return raise_fmt(OT_ERR_UNIMPLEMENTED, "more than %d parameters or outputs", MAX_ARGS);
    argview vstack[8];
    void *pstack[8], *ostack[8];
    PyObject *rstack[8];
    int nv = (int)n, no = e->nouts;
    argview *v = nv <= 8 ? vstack : calloc((size_t)nv, sizeof *v);
    void **params = nv <= 8 ? pstack : calloc((size_t)nv, sizeof(void *));
    void **outs = no <= 8 ? ostack : calloc((size_t)no, sizeof(void *));
    PyObject **res = no <= 8 ? rstack : calloc((size_t)no, sizeof(PyObject *));
    PyObject *ret = NULL;
    int got = 0;
    if (!v || !params || !outs || !res) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < no; k++) res[k] = NULL;
    for (; got < nv; got++) {
        PyObject *o = PyTuple_GetItem(args, got);
        if (view_from_obj(o, &v[got], &e->pshape[got], got) < 0) goto done;
        if (!ot_shape_equal(&v[got].shape, &e->pshape[got])) {
            char w[160], h[160];
            shape_str(&e->pshape[got], w, sizeof w);
            shape_str(&v[got].shape, h, sizeof h);
            got++;
            raise_fmt(OT_ERR_SHAPE_MISMATCH, "parameter %d: expected %s, got %s", got - 1, w, h);
            goto done;
        }
        params[got] = v[got].data;
    }
    if (donate && donated_overlap(e, v, nv) < 0) goto done;
    for (int k = 0; k < no; k++) {
        int a = e->alias[k];
        if (a >= 0 && donate) {
            /* the output is written into the caller's parameter memory */
            if (v[a].readonly) {
                raise_fmt(OT_ERR_INVALID_ARGUMENT,
                          "parameter %d is donated (donate=True) but read-only or a copy", a);
                goto done;
            }
            outs[k] = params[a];
            res[k] = Py_NewRef(PyTuple_GetItem(args, a));
            continue;
        }
        ArrayObject *arr = array_new(&e->oshape[k]);
        if (!arr) goto done;
        res[k] = (PyObject *)arr;
        outs[k] = arr->data;
        if (a >= 0) {
            /* not donated: the run updates a copy of the parameter in place */
            memcpy(arr->data, params[a], (size_t)arr->nbytes);
            params[a] = arr->data;
        }
    }
    void *arena = NULL;
    if (e->arena_size > 0) {
        arena = atomic_exchange(&e->arena, NULL);
        if (!arena) arena = ot_aligned_alloc(OT_ALIGNMENT, (size_t)e->arena_size);
        if (!arena) {
            PyErr_NoMemory();
            goto done;
        }
    }
    ot_run_options ro = ot_run_options_default();
    ro.profile = e->prof;
    ot_status st;
    atomic_fetch_add(&e->running, 1);
    Py_BEGIN_ALLOW_THREADS st = ot_execute_on_host(e->exe, arena, params, outs, &ro, 0, NULL);
    Py_END_ALLOW_THREADS atomic_fetch_sub(&e->running, 1);
    if (arena) {
        void *expect = NULL;
        if (!atomic_compare_exchange_strong(&e->arena, &expect, arena)) ot_aligned_free(arena);
    }
    if (st != OT_OK) {
        raise_status(st);
        goto done;
    }
    if (!e->tuple_root && no == 1) {
        ret = res[0];
        res[0] = NULL;
    } else {
        ret = PyTuple_New(no);
        if (!ret) goto done;
        for (int k = 0; k < no; k++) {
            PyTuple_SetItem(ret, k, res[k]);
            res[k] = NULL;
        }
    }
done:
    if (v)
        for (int k = 0; k < got && k < nv; k++) view_release(&v[k]);
    if (res)
        for (int k = 0; k < no; k++) Py_XDECREF(res[k]);
    if (v != vstack) free(v);
    if (params != pstack) free(params);
    if (outs != ostack) free(outs);
    if (res != rstack) free(res);
    return ret;
}

static PyObject *shapes_list(const ot_shape *s, int n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int k = 0; k < n; k++) {
        PyObject *dims = shape_tuple(&s[k]);
        PyObject *t = dims ? Py_BuildValue("(sN)", ot_dtype_name(s[k].dtype), dims) : NULL;
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, k, t);
    }
    return l;
}

static PyObject *exe_get_params(PyObject *self, void *c) {
    (void)c;
    ExeObject *e = (ExeObject *)self;
    if (exe_live(e) < 0) return NULL;
    return shapes_list(e->pshape, e->nparams);
}
static PyObject *exe_get_outputs(PyObject *self, void *c) {
    (void)c;
    ExeObject *e = (ExeObject *)self;
    if (exe_live(e) < 0) return NULL;
    return shapes_list(e->oshape, e->nouts);
}
static PyObject *exe_get_closed(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(((ExeObject *)self)->exe == NULL);
}

static PyObject *exe_hlo(PyObject *self, PyObject *unused) {
    (void)unused;
    ExeObject *e = (ExeObject *)self;
    if (exe_live(e) < 0) return NULL;
    char *t = ot_hlo_print(ot_executable_module(e->exe), NULL);
    if (!t) return PyErr_NoMemory();
    PyObject *s = PyUnicode_FromString(t);
    ot_free(t);
    return s;
}

static int dict_set(PyObject *d, const char *k, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

static PyObject *exe_profile(PyObject *self, PyObject *unused) {
    (void)unused;
    ExeObject *e = (ExeObject *)self;
    if (exe_live(e) < 0) return NULL;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (dict_set(d, "kernels", PyLong_FromLong(ot_executable_kernel_count(e->exe))) < 0 ||
        dict_set(d, "arena_bytes", PyLong_FromLongLong(e->arena_size)) < 0 ||
        dict_set(d, "flops", PyLong_FromLongLong(ot_executable_total_flops(e->exe))) < 0 ||
        dict_set(d, "bytes", PyLong_FromLongLong(ot_executable_total_bytes(e->exe))) < 0)
        goto fail;
    ot_native_stats ns;
    ot_executable_native_stats(e->exe, &ns);
    if (dict_set(d, "native_kernels", PyLong_FromLong(ns.kernels)) < 0) goto fail;
    PyObject *passes = PyList_New(0);
    if (dict_set(d, "passes", passes) < 0) goto fail;
    for (int i = 0; i < ot_executable_stat_count(e->exe); i++) {
        const ot_pass_stat *p = ot_executable_stat(e->exe, i);
        PyObject *t = Py_BuildValue(
            "{s:s,s:i,s:d,s:L,s:L,s:O}", "name", p->name, "iteration", p->iteration, "seconds",
            (double)p->time_ns / 1e9, "before", (long long)p->instrs_before, "after",
            (long long)p->instrs_after, "changed", p->changed ? Py_True : Py_False);
        if (!t || PyList_Append(passes, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    PyObject *runs = PyList_New(0);
    if (dict_set(d, "runs", runs) < 0) goto fail;
    for (int i = 0; e->prof && i < ot_profile_kernel_count(e->prof); i++) {
        const ot_kernel_profile *k = ot_profile_kernel(e->prof, i);
        /* the compile's own events (compile, compile-pass, codegen) are in "passes" */
        if (!strncmp(k->kind, "compile", 7) || !strcmp(k->kind, "codegen")) continue;
        PyObject *t = Py_BuildValue("{s:s,s:s,s:L,s:d,s:d,s:d,s:L,s:L}", "name", k->name, "kind",
                                    k->kind, "calls", (long long)k->calls, "total_seconds",
                                    (double)k->total_ns / 1e9, "min_seconds",
                                    (double)k->min_ns / 1e9, "max_seconds", (double)k->max_ns / 1e9,
                                    "flops", (long long)k->flops, "bytes", (long long)k->bytes);
        if (!t || PyList_Append(runs, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *exe_trace(PyObject *self, PyObject *args) {
    ExeObject *e = (ExeObject *)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (exe_live(e) < 0) return NULL;
    if (!e->prof)
        return raise_fmt(OT_ERR_FAILED_PRECONDITION,
                         "no profile: compile with profile=True to record one");
    ot_status st = ot_profile_write_chrome_trace(e->prof, path);
    if (st != OT_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *exe_save(PyObject *self, PyObject *args) {
    ExeObject *e = (ExeObject *)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (exe_live(e) < 0) return NULL;
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st = ot_executable_save(e->exe, path);
    Py_END_ALLOW_THREADS if (st != OT_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *exe_close(PyObject *self, PyObject *unused) {
    (void)unused;
    ExeObject *e = (ExeObject *)self;
    if (atomic_load(&e->running) > 0)
        return raise_fmt(OT_ERR_FAILED_PRECONDITION, "close: the executable is running");
    exe_release(e);
    Py_RETURN_NONE;
}

static PyObject *exe_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *exe_exit(PyObject *self, PyObject *args) {
    (void)args;
    return exe_close(self, NULL);
}

static PyObject *exe_repr(PyObject *self) {
    ExeObject *e = (ExeObject *)self;
    if (!e->exe) return PyUnicode_FromString("<optitpu.Executable (closed)>");
    return PyUnicode_FromFormat("<optitpu.Executable %s: %d parameters, %d outputs, %d kernels>",
                                ot_module_name(ot_executable_module(e->exe)), e->nparams, e->nouts,
                                ot_executable_kernel_count(e->exe));
}

static PyMethodDef exe_methods[] = {
    {"hlo", exe_hlo, METH_NOARGS, "The compiled module as HLO text (fusions, schedule order)."},
    {"profile", exe_profile, METH_NOARGS,
     "Compile statistics and, with profile=True, per-kernel run times."},
    {"chrome_trace", exe_trace, METH_VARARGS, "Writes the recorded profile as a Chrome trace."},
    {"save", exe_save, METH_VARARGS, "Writes the executable to a verified file (optitpu.load)."},
    {"close", exe_close, METH_NOARGS,
     "Frees the executable now; later use raises FailedPrecondition."},
    {"__enter__", exe_enter, METH_NOARGS, NULL},
    {"__exit__", exe_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef exe_getset[] = {
    {"params", exe_get_params, NULL, "[(dtype, shape)] of the parameters", NULL},
    {"outputs", exe_get_outputs, NULL, "[(dtype, shape)] of the outputs", NULL},
    {"closed", exe_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot exe_slots[] = {
    {Py_tp_dealloc, exe_dealloc},
    {Py_tp_call, exe_call},
    {Py_tp_repr, exe_repr},
    {Py_tp_methods, exe_methods},
    {Py_tp_getset, exe_getset},
    {Py_tp_doc, "A compiled HLO module: exe(*arrays, donate=False) runs it on the host."},
    {0, NULL},
};

static PyType_Spec exe_spec = {"optitpu.Executable", sizeof(ExeObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, exe_slots};

/* ---- module functions --------------------------------------------------------------------- */

/* _core.compile(text: bytes, filename: str, opt_level: int, profile: bool, cache: str|bool|None) */
static PyObject *mod_compile(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"text", "filename", "opt_level", "profile", "cache", NULL};
    const char *text, *filename = NULL;
    Py_ssize_t len;
    int opt_level = 2, profile = 0;
    PyObject *cache = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y#|zipO", kwlist, &text, &len, &filename,
                                     &opt_level, &profile, &cache))
        return NULL;
    if (opt_level < 0 || opt_level > 2)
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "opt_level %d: 0, 1 or 2", opt_level);
    const char *cache_dir = NULL;
    bool use_cache = false;
    if (PyUnicode_Check(cache)) {
        cache_dir = PyUnicode_AsUTF8AndSize(cache, NULL);
        if (!cache_dir) return NULL;
        use_cache = true;
    } else if (cache != Py_None) {
        int t = PyObject_IsTrue(cache);
        if (t < 0) return NULL;
        use_cache = t;
    }
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = filename;
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = opt_level;
    ot_module *m = NULL;
    ot_executable *exe = NULL;
    ot_profile *prof = NULL;
    ot_compile_cache *cc = NULL;
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st = ot_hlo_parse(text, (size_t)len, &po, &m);
    if (st == OT_OK && profile) st = ot_profile_create(&prof);
    if (st == OT_OK && use_cache) {
        ot_compile_cache_options cco = {cache_dir, 0};
        st = ot_compile_cache_open(&cco, &cc);
    }
    if (st == OT_OK) {
        if (prof)
            st = ot_profile_compile(prof, m, &co, &exe);
        else if (cc)
            st = ot_compile_cached(m, &co, cc, &exe, NULL);
        else
            st = ot_compile(m, &co, &exe);
    }
    Py_END_ALLOW_THREADS ot_module_free(m);
    ot_compile_cache_free(cc);
    if (st != OT_OK) {
        ot_profile_free(prof);
        return raise_status(st);
    }
    return exe_wrap(exe, NULL, prof);
}

static PyObject *mod_load(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    ot_executable *exe = NULL;
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st = ot_executable_load(path, &exe);
    Py_END_ALLOW_THREADS if (st != OT_OK) return raise_status(st);
    return exe_wrap(exe, NULL, NULL);
}

/* _core.optimizer_update(name, hparams: dict[str, float], shapes: [(dtype, shape)],
 *                        clip_grad_norm=0.0, clip_grad_value=0.0, clip_norm_optax=False,
 *                        flat=False)
 *   -> (Executable, [(state name, dtype, shape, initial value)])
 *   flat=True: -> (Executable, states, [(group, offset, count)] per tensor)
 * One compiled update (ot_tpu_optimizer, donated): parameters 0..n-1 the params, n..2n-1 the
 * grads, then the state tensors (parameter-major), then step and lr (f64 scalars); every output
 * is aliased to its parameter or state input, so exe(..., donate=True) updates them in place.
 * flat=True: the wrapper's flat mode (tpu_optim.h): the same layout with one flat 1-D
 * parameter, gradient and state buffer per flat group instead of one per tensor; each tensor's
 * place in its group's buffers is its (group, offset, count), the padding between tensors zero. */
static PyObject *mod_optimizer_update(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {
        "name", "hparams", "shapes", "clip_grad_norm", "clip_grad_value", "clip_norm_optax",
        "flat", NULL};
    const char *name;
    PyObject *hp, *shapes;
    double clip_norm = 0, clip_value = 0;
    int clip_optax = 0, flat = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO!O|ddpp", kwlist, &name, &PyDict_Type, &hp,
                                     &shapes, &clip_norm, &clip_value, &clip_optax, &flat))
        return NULL;
    PyObject *seq = PySequence_Fast(shapes, "shapes: a sequence of (dtype, shape)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Size(seq);
    ot_optimizer *o = NULL;
    ot_shape *ps = NULL;
    PyObject *ret = NULL;
    if (n <= 0 || n > 1 << 20) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "an optimizer needs 1 or more parameters, got %zd", n);
        goto out;
    }
    ps = calloc((size_t)n, sizeof *ps);
    if (!ps) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PySequence_GetItem(seq, k);
        const char *dt;
        PyObject *dims;
        if (!item || !PyArg_ParseTuple(item, "sO", &dt, &dims)) {
            Py_XDECREF(item);
            goto out;
        }
        ot_dtype t = ot_dtype_from_name(dt, strlen(dt));
        PyObject *dseq = PySequence_Fast(dims, "shape: a sequence of ints");
        Py_DECREF(item);
        if (!dseq) goto out;
        Py_ssize_t r = PySequence_Size(dseq);
        int64_t d[OT_MAX_RANK];
        if (r > OT_MAX_RANK) {
            Py_DECREF(dseq);
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "parameter %zd has rank %zd; at most %d", k, r,
                      OT_MAX_RANK);
            goto out;
        }
        for (Py_ssize_t j = 0; j < r; j++) {
            PyObject *x = PySequence_GetItem(dseq, j);
            d[j] = x ? PyLong_AsLongLong(x) : -1;
            Py_XDECREF(x);
        }
        Py_DECREF(dseq);
        if (PyErr_Occurred()) goto out;
        if (t == OT_DTYPE_INVALID) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "parameter %zd: unknown dtype '%s'", k, dt);
            goto out;
        }
        if (ot_shape_make(&ps[k], t, (int)r, d) != OT_OK) {
            raise_status(OT_ERR_INVALID_ARGUMENT);
            goto out;
        }
    }
    ot_status st = ot_optimizer_new(name, &o);
    if (st != OT_OK) {
        raise_status(st);
        goto out;
    }
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(hp, &pos, &key, &val)) {
        const char *kn = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, NULL) : NULL;
        if (!kn) {
            if (!PyErr_Occurred())
                raise_fmt(OT_ERR_INVALID_ARGUMENT, "hyper-parameter names are strings");
            goto out;
        }
        double x = PyFloat_AsDouble(val);
        if (x == -1.0 && PyErr_Occurred()) goto out;
        if ((st = ot_optimizer_set(o, kn, x)) != OT_OK) {
            raise_status(st);
            goto out;
        }
    }
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = clip_norm;
    to.clip_grad_value = clip_value;
    to.clip_norm_optax = clip_optax;
    to.flat = flat;
    ot_tpu_optimizer *t = NULL;
    Py_BEGIN_ALLOW_THREADS st = ot_tpu_optimizer_create(o, ps, (int)n, &to, &t);
    Py_END_ALLOW_THREADS if (st != OT_OK) {
        raise_status(st);
        goto out;
    }
    int ns = ot_tpu_optimizer_state_count(t);
    PyObject *states = PyList_New(ns);
    if (!states) {
        ot_tpu_optimizer_free(t);
        goto out;
    }
    int per = ot_optimizer_state_count(o);
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(o);
    for (int i = 0; i < ns; i++) {
        ot_shape s;
        if ((st = ot_tpu_optimizer_state_shape(t, i, &s)) != OT_OK) {
            raise_status(st);
            Py_DECREF(states);
            ot_tpu_optimizer_free(t);
            goto out;
        }
        /* the optimizer's slot by name ("<k>.<slot>", flat "flat<g>.<dtype>.<slot>"): a bf16 or
         * f16 tensor or group has its f32 master after its slots (initial value: the
         * parameter, widened, which the caller copies in) */
        const char *sn = ot_tpu_optimizer_state_name(t, i), *dot = strchr(sn, '.');
        if (flat && dot) dot = strchr(dot + 1, '.');
        int slot = per;
        for (int q = 0; q < per && dot; q++)
            if (!strcmp(ot_optimizer_state_name(o, q), dot + 1)) slot = q;
        double init = vt->state_init && slot < per ? vt->state_init(o, slot) : 0.0;
        PyObject *dims = shape_tuple(&s);
        PyObject *tup = dims ? Py_BuildValue("(ssNd)", ot_tpu_optimizer_state_name(t, i),
                                             ot_dtype_name(s.dtype), dims, init)
                             : NULL;
        if (!tup) {
            Py_DECREF(states);
            ot_tpu_optimizer_free(t);
            goto out;
        }
        PyList_SetItem(states, i, tup);
    }
    PyObject *exe = exe_wrap((ot_executable *)ot_tpu_optimizer_executable(t), t, NULL);
    if (!exe) {
        Py_DECREF(states);
        goto out;
    }
    if (!flat) {
        ret = Py_BuildValue("(NN)", exe, states);
        goto out;
    }
    PyObject *views = PyList_New(n);
    for (Py_ssize_t k = 0; views && k < n; k++) {
        ot_tpu_flat_view fv;
        if ((st = ot_tpu_optimizer_flat_view(t, (int)k, &fv)) != OT_OK) {
            raise_status(st);
            Py_CLEAR(views);
            break;
        }
        PyObject *tup = Py_BuildValue("(iLL)", fv.group, (long long)fv.offset, (long long)fv.count);
        if (!tup)
            Py_CLEAR(views);
        else
            PyList_SetItem(views, k, tup);
    }
    if (!views) {
        Py_DECREF(exe);
        Py_DECREF(states);
        goto out;
    }
    ret = Py_BuildValue("(NNN)", exe, states, views);
out:
    ot_optimizer_free(o);
    free(ps);
    Py_DECREF(seq);
    return ret;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(ot_version());
}

/* _core.from_buffer(obj) -> (dtype, shape) of what the binding sees: tests and error messages. */
static PyObject *mod_describe(PyObject *mod, PyObject *arg) {
    (void)mod;
    argview v;
    if (view_from_obj(arg, &v, NULL, 0) < 0) return NULL;
    PyObject *dims = shape_tuple(&v.shape);
    PyObject *r =
        dims ? Py_BuildValue("(sNKO)", ot_dtype_name(v.shape.dtype), dims,
                             (unsigned long long)(uintptr_t)v.data, v.readonly ? Py_True : Py_False)
             : NULL;
    view_release(&v);
    return r;
}

/* _core.copy(obj) -> optitpu.Array: a copy of any array-like (the one explicit copy). */
static PyObject *mod_copy(PyObject *mod, PyObject *arg) {
    (void)mod;
    argview v;
    if (view_from_obj(arg, &v, NULL, 0) < 0) return NULL;
    ArrayObject *a = array_new(&v.shape);
    if (a) memcpy(a->data, v.data, (size_t)a->nbytes);
    view_release(&v);
    return (PyObject *)a;
}

/* ---- safetensors and checkpoints ------------------------------------------------------ */

/* Views of the values of a {name: array} mapping, in the mapping's order. */
typedef struct {
    Py_ssize_t n;
    argview *v;
    const char **names;
    PyObject *items; /* keeps the names' strings alive */
} named_views;

static void named_views_release(named_views *nv) {
    for (Py_ssize_t k = 0; nv->v && k < nv->n; k++) view_release(&nv->v[k]);
    free(nv->v);
    free(nv->names);
    Py_XDECREF(nv->items);
    memset(nv, 0, sizeof *nv);
}

static int named_views_get(PyObject *mapping, named_views *nv) {
    memset(nv, 0, sizeof *nv);
    if (!PyDict_Check(mapping)) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "tensors: a dict of name -> array");
        return -1;
    }
    nv->items = PyDict_Items(mapping);
    if (!nv->items) return -1;
    Py_ssize_t n = PyList_Size(nv->items);
    nv->v = calloc((size_t)n + 1, sizeof *nv->v);
    nv->names = calloc((size_t)n + 1, sizeof *nv->names);
    if (!nv->v || !nv->names) {
        PyErr_NoMemory();
        named_views_release(nv);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *it = PyList_GetItem(nv->items, k);
        PyObject *key = PyTuple_GetItem(it, 0);
        if (!PyUnicode_Check(key)) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "tensor names are strings");
            named_views_release(nv);
            return -1;
        }
        nv->names[k] = PyUnicode_AsUTF8AndSize(key, NULL);
        if (!nv->names[k] || view_from_obj(PyTuple_GetItem(it, 1), &nv->v[k], NULL, (int)k) < 0) {
            named_views_release(nv);
            return -1;
        }
        nv->n = k + 1;
    }
    return 0;
}

static PyObject *array_copy_of(const ot_shape *s, const void *data) {
    ArrayObject *a = array_new(s);
    if (a && a->nbytes) memcpy(a->data, data, (size_t)a->nbytes);
    return (PyObject *)a;
}

/* _core.st_save(path, {name: array}, {key: value}) */
static PyObject *mod_st_save(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    PyObject *tensors, *meta = Py_None;
    if (!PyArg_ParseTuple(args, "sO|O", &path, &tensors, &meta)) return NULL;
    named_views nv;
    if (named_views_get(tensors, &nv) < 0) return NULL;
    PyObject *ret = NULL, *mitems = NULL;
    ot_st_entry *e = calloc((size_t)nv.n + 1, sizeof *e);
    ot_st_kv *kv = NULL;
    Py_ssize_t nmeta = 0;
    if (!e) {
        PyErr_NoMemory();
        goto out;
    }
    if (meta != Py_None) {
        if (!PyDict_Check(meta)) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "metadata: a dict of str -> str");
            goto out;
        }
        mitems = PyDict_Items(meta);
        if (!mitems) goto out;
        nmeta = PyList_Size(mitems);
        kv = calloc((size_t)nmeta + 1, sizeof *kv);
        if (!kv) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t k = 0; k < nmeta; k++) {
            PyObject *it = PyList_GetItem(mitems, k);
            PyObject *a = PyTuple_GetItem(it, 0), *b = PyTuple_GetItem(it, 1);
            if (!PyUnicode_Check(a) || !PyUnicode_Check(b)) {
                raise_fmt(OT_ERR_INVALID_ARGUMENT, "metadata: a dict of str -> str");
                goto out;
            }
            kv[k].key = PyUnicode_AsUTF8AndSize(a, NULL);
            kv[k].value = PyUnicode_AsUTF8AndSize(b, NULL);
            if (!kv[k].key || !kv[k].value) goto out;
        }
    }
    for (Py_ssize_t k = 0; k < nv.n; k++) {
        e[k].name = nv.names[k];
        e[k].dtype = ot_st_dtype_from_core(nv.v[k].shape.dtype);
        e[k].rank = nv.v[k].shape.rank;
        e[k].dims = nv.v[k].shape.dims;
        e[k].data = nv.v[k].data;
    }
    ot_st_write_options wo = ot_st_write_options_default();
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st =
        ot_safetensors_write_file(path, e, (size_t)nv.n, kv, (size_t)nmeta, &wo, NULL);
    Py_END_ALLOW_THREADS if (st != OT_OK) raise_status(st);
    else ret = Py_NewRef(Py_None);
out:
    free(e);
    free(kv);
    Py_XDECREF(mitems);
    named_views_release(&nv);
    return ret;
}

/* The tensors of a parsed file as {name: Array} (copies: the mapping closes after). */
static int st_tensors_into(const ot_safetensors *f, PyObject *d, const char *prefix) {
    for (size_t i = 0; i < ot_safetensors_count(f); i++) {
        const ot_st_info *info = ot_safetensors_at(f, i);
        ot_tensor view;
        ot_status st = ot_safetensors_tensor(f, info->name, &view);
        if (st != OT_OK) {
            raise_status(st);
            return -1;
        }
        PyObject *a = array_copy_of(&view.shape, view.data);
        if (!a) return -1;
        PyObject *key = prefix ? PyUnicode_FromFormat("%s%s", prefix, info->name)
                               : PyUnicode_FromString(info->name);
        int r = key ? PyDict_SetItem(d, key, a) : -1;
        Py_XDECREF(key);
        Py_DECREF(a);
        if (r < 0) return -1;
    }
    return 0;
}

/* _core.st_load(path) -> ({name: Array}, {key: value}) */
static PyObject *mod_st_load(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    ot_safetensors *f = NULL;
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st = ot_safetensors_open(path, &f);
    Py_END_ALLOW_THREADS if (st != OT_OK) return raise_status(st);
    PyObject *d = PyDict_New(), *m = PyDict_New(), *ret = NULL;
    if (!d || !m || st_tensors_into(f, d, NULL) < 0) goto out;
    for (size_t i = 0; i < ot_safetensors_metadata_count(f); i++) {
        ot_st_kv kv = ot_safetensors_metadata_at(f, i);
        if (dict_set(m, kv.key, PyUnicode_FromString(kv.value)) < 0) goto out;
    }
    ret = Py_BuildValue("(OO)", d, m);
out:
    Py_XDECREF(d);
    Py_XDECREF(m);
    ot_safetensors_free(f);
    return ret;
}

/* _core.ckpt_save(root, step, {role: {name: array}}, {metric: value}) -> stats dict */
static PyObject *mod_ckpt_save(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *root;
    long long step;
    PyObject *roles, *metrics = Py_None;
    if (!PyArg_ParseTuple(args, "sLO!|O", &root, &step, &PyDict_Type, &roles, &metrics))
        return NULL;
    if (step < 0) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "step %lld: must be >= 0", step);
    PyObject *ritems = PyDict_Items(roles), *mitems = NULL, *ret = NULL;
    if (!ritems) return NULL;
    Py_ssize_t nr = PyList_Size(ritems), nm = 0;
    named_views *nv = calloc((size_t)nr + 1, sizeof *nv);
    ot_ckpt_shard *sh = calloc((size_t)nr + 1, sizeof *sh);
    ot_ckpt_tensor **ts = calloc((size_t)nr + 1, sizeof *ts);
    ot_ckpt_metric *mt = NULL;
    ot_ckpt_manager *m = NULL;
    if (!nv || !sh || !ts) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t r = 0; r < nr; r++) {
        PyObject *it = PyList_GetItem(ritems, r);
        PyObject *rn = PyTuple_GetItem(it, 0);
        sh[r].role = PyUnicode_Check(rn) ? PyUnicode_AsUTF8AndSize(rn, NULL) : NULL;
        if (!sh[r].role) {
            if (!PyErr_Occurred()) raise_fmt(OT_ERR_INVALID_ARGUMENT, "role names are strings");
            goto out;
        }
        if (named_views_get(PyTuple_GetItem(it, 1), &nv[r]) < 0) goto out;
        ts[r] = calloc((size_t)nv[r].n + 1, sizeof **ts);
        if (!ts[r]) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t k = 0; k < nv[r].n; k++)
            ts[r][k] = (ot_ckpt_tensor){nv[r].names[k], nv[r].v[k].shape, nv[r].v[k].data};
        sh[r].index = 0;
        sh[r].count = 1;
        sh[r].tensors = ts[r];
        sh[r].ntensors = (size_t)nv[r].n;
    }
    if (metrics != Py_None) {
        if (!PyDict_Check(metrics)) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "metrics: a dict of str -> float");
            goto out;
        }
        mitems = PyDict_Items(metrics);
        if (!mitems) goto out;
        nm = PyList_Size(mitems);
        mt = calloc((size_t)nm + 1, sizeof *mt);
        if (!mt) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t k = 0; k < nm; k++) {
            PyObject *it = PyList_GetItem(mitems, k);
            PyObject *a = PyTuple_GetItem(it, 0);
            mt[k].name = PyUnicode_Check(a) ? PyUnicode_AsUTF8AndSize(a, NULL) : NULL;
            mt[k].value = PyFloat_AsDouble(PyTuple_GetItem(it, 1));
            if (!mt[k].name || PyErr_Occurred()) {
                if (!PyErr_Occurred())
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "metric names are strings");
                goto out;
            }
        }
    }
    ot_ckpt_save_args a;
    memset(&a, 0, sizeof a);
    a.step = step;
    a.shards = sh;
    a.nshards = (size_t)nr;
    a.metrics = mt;
    a.nmetrics = (size_t)nm;
    ot_ckpt_options o = ot_ckpt_options_default();
    ot_ckpt_save_stats stats;
    memset(&stats, 0, sizeof stats);
    ot_status st, cst;
    Py_BEGIN_ALLOW_THREADS st = ot_ckpt_open(root, &o, &m);
    if (st == OT_OK) st = ot_ckpt_save(m, &a, &stats);
    cst = ot_ckpt_close(m);
    if (st == OT_OK) st = cst;
    Py_END_ALLOW_THREADS if (st != OT_OK) {
        raise_status(st);
        goto out;
    }
    ret = Py_BuildValue("{s:L,s:K,s:d}", "step", (long long)stats.step, "bytes",
                        (unsigned long long)stats.bytes, "seconds", stats.write_seconds);
out:
    for (Py_ssize_t r = 0; nv && r < nr; r++) named_views_release(&nv[r]);
    for (Py_ssize_t r = 0; ts && r < nr; r++) free(ts[r]);
    free(nv);
    free(sh);
    free(ts);
    free(mt);
    Py_XDECREF(mitems);
    Py_DECREF(ritems);
    return ret;
}

/* _core.ckpt_restore(root, step_dir_or_None) -> (step, {role: {name: Array}}, {metric: value})
 * step_dir None: the newest step that verifies (rollback past damaged ones). */
static PyObject *mod_ckpt_restore(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *root, *dir = NULL;
    if (!PyArg_ParseTuple(args, "sz", &root, &dir)) return NULL;
    ot_ckpt *ck = NULL;
    ot_status st;
    ot_ckpt_options o = ot_ckpt_options_default();
    Py_BEGIN_ALLOW_THREADS st =
        dir ? ot_ckpt_load(dir, &ck) : ot_ckpt_restore_latest(root, &o, &ck, NULL);
    Py_END_ALLOW_THREADS if (st != OT_OK) return raise_status(st);
    const ot_ckpt_manifest *man = ot_ckpt_manifest_of(ck);
    PyObject *roles = PyDict_New(), *metrics = PyDict_New(), *ret = NULL;
    if (!roles || !metrics) goto out;
    for (size_t i = 0; i < ot_ckpt_file_count(ck) && i < man->nfiles; i++) {
        const char *role = man->files[i].role;
        PyObject *d = PyDict_GetItemString(roles, role);
        if (!d) {
            PyObject *nd = PyDict_New();
            if (!nd || dict_set(roles, role, nd) < 0) goto out;
            d = nd;
        }
        if (st_tensors_into(ot_ckpt_file(ck, i), d, NULL) < 0) goto out;
    }
    for (size_t i = 0; i < man->nmetrics; i++)
        if (dict_set(metrics, man->metrics[i].name, PyFloat_FromDouble(man->metrics[i].value)) < 0)
            goto out;
    ret = Py_BuildValue("(LOO)", (long long)ot_ckpt_step(ck), roles, metrics);
out:
    Py_XDECREF(roles);
    Py_XDECREF(metrics);
    ot_ckpt_free(ck);
    return ret;
}

/* _core.ckpt_verify(step_dir) -> {step, files, bytes}; CorruptData naming every bad file */
static PyObject *mod_ckpt_verify(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *dir;
    if (!PyArg_ParseTuple(args, "s", &dir)) return NULL;
    ot_ckpt_verify_report rep;
    memset(&rep, 0, sizeof rep);
    ot_status st;
    Py_BEGIN_ALLOW_THREADS st = ot_ckpt_verify_dir(dir, &rep);
    Py_END_ALLOW_THREADS PyObject *ret = NULL;
    if (st != OT_OK) {
        char msg[1024] = "";
        size_t w = 0;
        for (size_t i = 0; i < rep.nbad && w < sizeof msg - 1; i++)
            w += (size_t)snprintf(msg + w, sizeof msg - w, "%s%s: %s", i ? "; " : "",
                                  rep.bad[i].path, rep.bad[i].reason);
        if (rep.nbad)
            raise_fmt(st, "%s", msg);
        else
            raise_status(st);
    } else {
        ret = Py_BuildValue("{s:L,s:n,s:K}", "step", (long long)rep.step, "files",
                            (Py_ssize_t)rep.nfiles, "bytes", (unsigned long long)rep.bytes);
    }
    ot_ckpt_verify_report_clear(&rep);
    return ret;
}

/* _core.ckpt_list(root) -> [(step, path, committed, damaged)] */
static PyObject *mod_ckpt_list(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *root;
    if (!PyArg_ParseTuple(args, "s", &root)) return NULL;
    ot_ckpt_entry *e = NULL;
    size_t n = 0;
    ot_status st = ot_ckpt_list(root, &e, &n);
    if (st != OT_OK) return raise_status(st);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t =
            Py_BuildValue("(LsOO)", (long long)e[i].step, e[i].path,
                          e[i].committed ? Py_True : Py_False, e[i].damaged ? Py_True : Py_False);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    ot_ckpt_entries_free(e, n);
    return l;
}

/* ---- pod: collectives over in-process host devices --------------------------------------- */

typedef struct {
    PyObject_HEAD int n;
    ot_topology *topo; /* NULL: the collectives' own rings */
    ot_local_world *world;
    ot_comm **comms;
    atomic_int busy; /* a collective in progress (one at a time per pod) */
} PodObject;

static PyTypeObject *g_pod_type;

static void pod_release_world(PodObject *p) {
    for (int r = 0; p->comms && r < p->n; r++) ot_comm_free(p->comms[r]);
    free(p->comms);
    p->comms = NULL;
    ot_local_world_free(p->world);
    p->world = NULL;
}

/* A fresh world and communicators (also after a failed collective aborted the old ones). */
static ot_status pod_build_world(PodObject *p) {
    pod_release_world(p);
    ot_status st = ot_local_world_create(p->n, &p->world);
    if (st != OT_OK) return st;
    p->comms = calloc((size_t)p->n, sizeof *p->comms);
    if (!p->comms) return ot_error(OT_ERR_OUT_OF_MEMORY, "pod: out of memory");
    for (int r = 0; r < p->n; r++) {
        if ((st = ot_local_world_comm(p->world, r, &p->comms[r])) != OT_OK) return st;
        if (p->topo && (st = ot_comm_set_topology(p->comms[r], p->topo)) != OT_OK) return st;
    }
    return OT_OK;
}

static void pod_dealloc(PyObject *self) {
    PodObject *p = (PodObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    pod_release_world(p);
    ot_topology_free(p->topo);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *pod_get_size(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(((PodObject *)self)->n);
}
static PyObject *pod_get_topology(PyObject *self, void *c) {
    (void)c;
    PodObject *p = (PodObject *)self;
    if (!p->topo) Py_RETURN_NONE;
    return PyUnicode_FromString(ot_topology_name(p->topo));
}

static PyGetSetDef pod_getset[] = {
    {"devices", pod_get_size, NULL, "number of devices", NULL},
    {"topology", pod_get_topology, NULL, "topology name, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pod_slots[] = {
    {Py_tp_dealloc, pod_dealloc},
    {Py_tp_getset, pod_getset},
    {Py_tp_doc, "In-process host devices joined by a communicator (optitpu.Pod)."},
    {0, NULL},
};

static PyType_Spec pod_spec = {"optitpu._core.PodHandle", sizeof(PodObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, pod_slots};

/* _core.pod_create(devices, topology|None) */
static PyObject *mod_pod_create(PyObject *mod, PyObject *args) {
    (void)mod;
    int n;
    const char *topo = NULL;
    if (!PyArg_ParseTuple(args, "i|z", &n, &topo)) return NULL;
    if (n < 1 || n > 4096) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "devices %d: 1..4096", n);
    allocfunc alloc = (allocfunc)PyType_GetSlot(g_pod_type, Py_tp_alloc);
    PodObject *p = (PodObject *)alloc(g_pod_type, 0);
    if (!p) return NULL;
    p->n = n;
    atomic_init(&p->busy, 0);
    ot_status st = OT_OK;
    if (topo && (st = ot_topology_preset(topo, &p->topo)) == OT_OK &&
        ot_topology_size(p->topo) != n)
        st = ot_error(OT_ERR_INVALID_ARGUMENT, "topology %s has %d devices, not %d", topo,
                      ot_topology_size(p->topo), n);
    if (st == OT_OK) st = pod_build_world(p);
    if (st != OT_OK) {
        Py_DECREF(p);
        return raise_status(st);
    }
    return (PyObject *)p;
}

typedef struct {
    ot_comm *comm;
    ot_coll_kind kind;
    ot_redop op;
    int root;
    ot_coll_options co;
    const void *send;
    void *recv;
    size_t count;
    ot_dtype dt;
    ot_status st;
    char err[256];
} coll_job;

static void *coll_thread(void *arg) {
    coll_job *j = arg;
    switch (j->kind) {
    case OT_COLL_ALLREDUCE:
        j->st = ot_comm_allreduce(j->comm, j->send, j->recv, j->count, j->dt, j->op, &j->co);
        break;
    case OT_COLL_ALLGATHER:
        j->st = ot_comm_allgather(j->comm, j->send, j->recv, j->count, j->dt, &j->co);
        break;
    case OT_COLL_REDUCE_SCATTER:
        j->st = ot_comm_reduce_scatter(j->comm, j->send, j->recv, j->count, j->dt, j->op, &j->co);
        break;
    case OT_COLL_BROADCAST:
        j->st = ot_comm_broadcast(j->comm, j->recv, j->count, j->dt, j->root, &j->co);
        break;
    case OT_COLL_ALLTOALL:
        j->st = ot_comm_alltoall(j->comm, j->send, j->recv, j->count, j->dt, &j->co);
        break;
    default: j->st = ot_error(OT_ERR_UNIMPLEMENTED, "collective %d", (int)j->kind);
    }
    if (j->st != OT_OK) snprintf(j->err, sizeof j->err, "%s", ot_last_error());
    return NULL;
}

/* _core.pod_collective(pod, kind, [array per device], op="sum", root=0, algo="auto")
 *   -> [Array per device] (new arrays; the inputs are read only)
 * allreduce / broadcast: each output has the input's shape; allgather: [devices * d0, ...];
 * reduce_scatter: [d0 / devices, ...]; alltoall: the input's shape (d0 divisible by devices). */
static PyObject *mod_pod_collective(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"pod", "kind", "arrays", "op", "root", "algo", NULL};
    PyObject *podobj, *arrays;
    const char *kname, *opname = "sum", *algoname = "auto";
    int root = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!sO|sis", kwlist, g_pod_type, &podobj, &kname,
                                     &arrays, &opname, &root, &algoname))
        return NULL;
    PodObject *p = (PodObject *)podobj;
    int kind = ot_coll_kind_from_name(kname), op = ot_redop_from_name(opname),
        algo = ot_coll_algo_from_name(algoname);
    if (kind < 0 || kind == OT_COLL_REDUCE || kind == OT_COLL_BARRIER)
        return raise_fmt(OT_ERR_INVALID_ARGUMENT,
                         "collective '%s': allreduce, allgather, reduce_scatter, broadcast or "
                         "alltoall",
                         kname);
    if (op < 0)
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "reduction '%s': sum, prod, max, min or mean",
                         opname);
    if (algo < 0) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "algorithm '%s' is unknown", algoname);
    if (root < 0 || root >= p->n)
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "root %d: 0..%d", root, p->n - 1);
    PyObject *seq = PySequence_Fast(arrays, "arrays: one array per device");
    if (!seq) return NULL;
    int n = p->n;
    PyObject *ret = NULL;
    argview *v = calloc((size_t)n, sizeof *v);
    coll_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    PyObject **outs = calloc((size_t)n, sizeof *outs);
    int got = 0;
    if (!v || !jobs || !th || !outs) {
        PyErr_NoMemory();
        goto out;
    }
    if (PySequence_Size(seq) != n) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "the pod has %d devices; got %zd arrays", n,
                  PySequence_Size(seq));
        goto out;
    }
    for (; got < n; got++) {
        PyObject *item = PySequence_GetItem(seq, got); /* the list keeps it alive after */
        int r = item ? view_from_obj(item, &v[got], NULL, got) : -1;
        Py_XDECREF(item);
        if (r < 0) goto out;
        if (got > 0 && !ot_shape_equal(&v[got].shape, &v[0].shape)) {
            char a[160], b[160];
            shape_str(&v[0].shape, a, sizeof a);
            shape_str(&v[got].shape, b, sizeof b);
            got++;
            raise_fmt(OT_ERR_SHAPE_MISMATCH, "array %d is %s, array 0 %s", got - 1, b, a);
            goto out;
        }
    }
    ot_shape in = v[0].shape, os = in;
    int64_t numel = ot_shape_numel_unchecked(&in);
    if ((kind == OT_COLL_ALLREDUCE || kind == OT_COLL_REDUCE_SCATTER) &&
        !ot_coll_dtype_supported(in.dtype)) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s cannot reduce %s", kname, ot_dtype_name(in.dtype));
        goto out;
    }
    size_t count = (size_t)numel;
    if (kind == OT_COLL_ALLGATHER || kind == OT_COLL_REDUCE_SCATTER || kind == OT_COLL_ALLTOALL) {
        if (in.rank == 0) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s needs arrays of rank >= 1", kname);
            goto out;
        }
        if (kind == OT_COLL_ALLGATHER)
            os.dims[0] = in.dims[0] * n;
        else {
            if (in.dims[0] % n) {
                raise_fmt(OT_ERR_SHAPE_MISMATCH, "%s: dimension 0 (%lld) is not a multiple of %d",
                          kname, (long long)in.dims[0], n);
                goto out;
            }
            if (kind == OT_COLL_REDUCE_SCATTER) os.dims[0] = in.dims[0] / n;
            count = (size_t)(numel / n);
        }
    }
    for (int r = 0; r < n; r++) {
        ArrayObject *a = array_new(&os);
        if (!a) goto out;
        outs[r] = (PyObject *)a;
        if (kind == OT_COLL_BROADCAST) memcpy(a->data, v[r].data, (size_t)a->nbytes);
        jobs[r] = (coll_job){p->comms[r],
                             (ot_coll_kind)kind,
                             (ot_redop)op,
                             root,
                             ot_coll_options_default(),
                             v[r].data,
                             a->data,
                             count,
                             in.dtype,
                             OT_OK,
                             ""};
        jobs[r].co.algo = (ot_coll_algo)algo;
    }
    if (atomic_exchange(&p->busy, 1)) {
        raise_fmt(OT_ERR_FAILED_PRECONDITION, "the pod is running another collective");
        goto out;
    }
    ot_status st = OT_OK;
    int started = 0;
    Py_BEGIN_ALLOW_THREADS for (; started < n;
                                started++) if (pthread_create(&th[started], NULL, coll_thread,
                                                              &jobs[started]) != 0) break;
    if (started < n) {
        /* the members already started wait for the missing ones: fail them */
        ot_local_world_fail(p->world, started);
        st = ot_error(OT_ERR_RESOURCE_EXHAUSTED, "pod: cannot start thread %d", started);
    }
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    Py_END_ALLOW_THREADS int bad = -1;
    for (int r = 0; r < started && bad < 0; r++)
        if (jobs[r].st != OT_OK) bad = r;
    if (st != OT_OK || bad >= 0) {
        ot_status fst = st != OT_OK ? st : jobs[bad].st;
        ot_status rst = pod_build_world(p); /* the failure aborted the communicators */
        atomic_store(&p->busy, 0);
        if (st != OT_OK)
            raise_status(st);
        else
            raise_fmt(fst, "device %d: %s", bad, jobs[bad].err);
        if (rst != OT_OK) PyErr_Format(error_class(rst), "%s", ot_last_error());
        goto out;
    }
    atomic_store(&p->busy, 0);
    ret = PyList_New(n);
    if (!ret) goto out;
    for (int r = 0; r < n; r++) {
        PyList_SetItem(ret, r, outs[r]);
        outs[r] = NULL;
    }
out:
    for (int r = 0; v && r < got && r < n; r++) view_release(&v[r]);
    for (int r = 0; outs && r < n; r++) Py_XDECREF(outs[r]);
    free(v);
    free(jobs);
    free(th);
    free(outs);
    Py_DECREF(seq);
    return ret;
}

/* ---- an executable on a pod's devices ------------------------------------------------------ */

typedef struct {
    const ot_executable *exe;
    void *arena;
    void **params, **outs;
    ot_run_options ro;
    int device;
    ot_status st;
    char err[256];
} device_job;

static void *device_thread(void *arg) {
    device_job *j = arg;
    j->st = ot_execute_on_host(j->exe, j->arena, j->params, j->outs, &j->ro, j->device, NULL);
    if (j->st != OT_OK) snprintf(j->err, sizeof j->err, "%s", ot_last_error());
    return NULL;
}

/* exe(*args, devices=pod): every device of the pod (an optitpu.Pod, its handle, or a count: a
 * pod of that many devices for this call) runs the executable on its own thread with the GIL
 * released. An argument is one array-like (every device reads it) or a list or tuple of one per
 * device. A module with replica_count x num_partitions > 1 must have exactly that many devices
 * (device g = replica * partitions + partition) and its collectives go through the pod's
 * communicators; a module of one replica runs independently on every device. Returns a list of
 * each device's results (as a call without devices= returns them). Outputs are new arrays (an
 * aliased output is computed in a copy of its parameter). */
static PyObject *exe_call_devices(ExeObject *e, PyObject *args, PyObject *devices) {
    PyObject *podobj = NULL;
    if (PyLong_Check(devices)) {
        PyObject *a = Py_BuildValue("(O)", devices);
        if (!a) return NULL;
        podobj = mod_pod_create(NULL, a);
        Py_DECREF(a);
        if (!podobj) return NULL;
    } else if (PyObject_TypeCheck(devices, g_pod_type)) {
        podobj = Py_NewRef(devices);
    } else {
        PyObject *h = PyObject_GetAttrString(devices, "_h"); /* optitpu.Pod */
        if (!h || !PyObject_TypeCheck(h, g_pod_type)) {
            Py_XDECREF(h);
            PyErr_Clear();
            return raise_fmt(OT_ERR_INVALID_ARGUMENT,
                             "devices=: an optitpu.Pod or a number of devices");
        }
        podobj = h;
    }
    PodObject *p = (PodObject *)podobj;
    int n = p->n, np = e->nparams, no = e->nouts;
    const ot_module_config *cfg = ot_module_get_config(ot_executable_module(e->exe));
    int64_t groups = (cfg->replica_count > 1 ? cfg->replica_count : 1) *
                     (cfg->num_partitions > 1 ? cfg->num_partitions : 1);
    Py_ssize_t na = PyTuple_Size(args);
    PyObject *ret = NULL;
    argview *v = NULL;
    device_job *jobs = NULL;
    pthread_t *th = NULL;
    PyObject **res = NULL;
    bool *got = NULL;
    bool busy = false;
    if (groups > 1 && groups != n) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT,
                  "the module has replica_count=%lld, num_partitions=%lld: it runs on %lld "
                  "devices, not %d",
                  (long long)cfg->replica_count, (long long)cfg->num_partitions, (long long)groups,
                  n);
        goto out;
    }
    if (na != np) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "the executable takes %d arrays, got %zd", np, na);
        goto out;
    }
    if ((int64_t)n * (np + 1) > (int64_t)MAX_ARGS * 64 || np > MAX_ARGS || no > MAX_ARGS) {
        raise_fmt(OT_ERR_UNIMPLEMENTED, "too many parameters or outputs for %d devices", n);
        goto out;
    }
    size_t nv = (size_t)n * (size_t)(np + 1);
    v = calloc(nv, sizeof *v);
    got = calloc(nv, sizeof *got);
    jobs = calloc((size_t)n, sizeof *jobs);
    th = calloc((size_t)n, sizeof *th);
    res = calloc((size_t)n * (size_t)(no + 1), sizeof *res);
    if (!v || !got || !jobs || !th || !res) {
        PyErr_NoMemory();
        goto out;
    }
    for (int r = 0; r < n; r++) {
        jobs[r].params = calloc((size_t)np + 1, sizeof(void *));
        jobs[r].outs = calloc((size_t)no + 1, sizeof(void *));
        if (!jobs[r].params || !jobs[r].outs) {
            PyErr_NoMemory();
            goto out;
        }
    }
    /* every argument of every device viewed and checked before anything runs */
    for (int k = 0; k < np; k++) {
        PyObject *o = PyTuple_GetItem(args, k);
        bool per = PyList_Check(o) || PyTuple_Check(o);
        if (per && PySequence_Size(o) != n) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT,
                      "argument %d: a list of one array per device needs %d, got %zd", k, n,
                      PySequence_Size(o));
            goto out;
        }
        for (int r = 0; r < (per ? n : 1); r++) {
            PyObject *item = per ? PySequence_GetItem(o, r) : Py_NewRef(o);
            argview *av = &v[(size_t)r * (size_t)np + (size_t)k];
            int rc = item ? view_from_obj(item, av, &e->pshape[k], k) : -1;
            Py_XDECREF(item); /* the tuple or list keeps it alive */
            if (rc < 0) goto out;
            got[(size_t)r * (size_t)np + (size_t)k] = true;
            if (!ot_shape_equal(&av->shape, &e->pshape[k])) {
                char w[160], h[160];
                shape_str(&e->pshape[k], w, sizeof w);
                shape_str(&av->shape, h, sizeof h);
                raise_fmt(OT_ERR_SHAPE_MISMATCH, "parameter %d (device %d): expected %s, got %s", k,
                          r, w, h);
                goto out;
            }
        }
        for (int r = 0; r < n; r++)
            jobs[r].params[k] = v[(size_t)(per ? r : 0) * (size_t)np + (size_t)k].data;
    }
    for (int r = 0; r < n; r++) {
        jobs[r].exe = e->exe;
        jobs[r].device = r;
        jobs[r].ro = ot_run_options_default();
        jobs[r].ro.profile = e->prof;
        jobs[r].ro.comm = groups > 1 ? p->comms[r] : NULL;
        for (int k = 0; k < no; k++) {
            ArrayObject *arr = array_new(&e->oshape[k]);
            if (!arr) goto out;
            res[(size_t)r * (size_t)no + (size_t)k] = (PyObject *)arr;
            jobs[r].outs[k] = arr->data;
            int a = e->alias[k];
            if (a >= 0) { /* the run updates a copy of the parameter in place */
                memcpy(arr->data, jobs[r].params[a], (size_t)arr->nbytes);
                jobs[r].params[a] = arr->data;
            }
        }
        if (e->arena_size > 0 &&
            !(jobs[r].arena = ot_aligned_alloc(OT_ALIGNMENT, (size_t)e->arena_size))) {
            PyErr_NoMemory();
            goto out;
        }
    }
    if (atomic_exchange(&p->busy, 1)) {
        raise_fmt(OT_ERR_FAILED_PRECONDITION, "the pod is running another collective or call");
        goto out;
    }
    busy = true;
    ot_status st = OT_OK;
    int started = 0;
    atomic_fetch_add(&e->running, 1);
    Py_BEGIN_ALLOW_THREADS for (; started < n;
                                started++) if (pthread_create(&th[started], NULL, device_thread,
                                                              &jobs[started]) != 0) break;
    if (started < n) {
        if (groups > 1) ot_local_world_fail(p->world, started); /* the others wait for it */
        st = ot_error(OT_ERR_RESOURCE_EXHAUSTED, "devices=: cannot start thread %d", started);
    }
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    Py_END_ALLOW_THREADS atomic_fetch_sub(&e->running, 1);
    int bad = -1;
    for (int r = 0; r < started && bad < 0; r++)
        if (jobs[r].st != OT_OK) bad = r;
    if (st != OT_OK || bad >= 0) {
        ot_status rst = groups > 1 ? pod_build_world(p) : OT_OK; /* a failure aborts them */
        if (st != OT_OK)
            raise_status(st);
        else
            raise_fmt(jobs[bad].st, "device %d: %s", bad, jobs[bad].err);
        if (rst != OT_OK) PyErr_Format(error_class(rst), "%s", ot_last_error());
        goto out;
    }
    ret = PyList_New(n);
    for (int r = 0; ret && r < n; r++) {
        PyObject *one;
        PyObject **rr = &res[(size_t)r * (size_t)no];
        if (!e->tuple_root && no == 1) {
            one = rr[0];
            rr[0] = NULL;
        } else {
            one = PyTuple_New(no);
            for (int k = 0; one && k < no; k++) {
                PyTuple_SetItem(one, k, rr[k]);
                rr[k] = NULL;
            }
        }
        if (!one) {
            Py_CLEAR(ret);
            break;
        }
        PyList_SetItem(ret, r, one);
    }
out:
    if (busy) atomic_store(&p->busy, 0);
    for (size_t i = 0; v && got && i < (size_t)n * (size_t)np; i++)
        if (got[i]) view_release(&v[i]);
    for (size_t i = 0; res && i < (size_t)n * (size_t)no; i++) Py_XDECREF(res[i]);
    for (int r = 0; jobs && r < n; r++) {
        free(jobs[r].params);
        free(jobs[r].outs);
        ot_aligned_free(jobs[r].arena);
    }
    free(v);
    free(got);
    free(jobs);
    free(th);
    free(res);
    Py_DECREF(podobj);
    return ret;
}

/* ---- train ------------------------------------------------------------------------------ */

typedef struct {
    PyObject *cb;
    bool failed;
} train_cb;

static void train_progress(void *ud, const ot_train_progress *pr) {
    train_cb *c = ud;
    if (!c->cb || c->failed) return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *d = Py_BuildValue(
        "{s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:i,s:O}", "step", (long long)pr->step, "total_steps",
        (long long)pr->total_steps, "loss", pr->loss, "train_accuracy", pr->train_accuracy,
        "test_accuracy", pr->test_accuracy, "lr", pr->lr, "samples_per_s", pr->samples_per_s,
        "devices", pr->devices, "evaluated", pr->evaluated ? Py_True : Py_False);
    PyObject *r = d ? PyObject_CallFunctionObjArgs(c->cb, d, NULL) : NULL;
    if (!r) {
        /* a callback cannot stop the run: reported once, then no longer called */
        PyErr_WriteUnraisable(c->cb);
        c->failed = true;
    }
    Py_XDECREF(r);
    Py_XDECREF(d);
    PyGILState_Release(g);
}

/* Strings of the options, copied (the GIL is released while training): 11 string options and
 * up to TRAIN_MAX_REPLICAS checkpoint replica roots. */
#define TRAIN_MAX_REPLICAS 8
#define TRAIN_STRS         (11 + TRAIN_MAX_REPLICAS)

/* _core.train(options: dict, on_progress=None) -> (report JSON, [(name, Array)]) */
static PyObject *mod_train(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *opts, *cb = Py_None;
    if (!PyArg_ParseTuple(args, "O!|O", &PyDict_Type, &opts, &cb)) return NULL;
    ot_train_options o = ot_train_options_default();
    char *strs[TRAIN_STRS] = {0};
    const char *replicas[TRAIN_MAX_REPLICAS];
    const char *cache_dir = NULL;
    bool use_cache = false;
    ot_compile_cache *cc = NULL;
    int nstr = 0;
    PyObject *key, *val, *ret = NULL;
    Py_ssize_t pos = 0;
    ot_train_report rep;
    memset(&rep, 0, sizeof rep);
    while (PyDict_Next(opts, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, NULL) : NULL;
        if (!k) {
            if (!PyErr_Occurred()) raise_fmt(OT_ERR_INVALID_ARGUMENT, "option names are strings");
            goto out;
        }
        const char **sp = !strcmp(k, "dataset")          ? &o.dataset
                          : !strcmp(k, "optimizer")      ? &o.optimizer
                          : !strcmp(k, "schedule")       ? &o.schedule
                          : !strcmp(k, "topology")       ? &o.topology
                          : !strcmp(k, "allreduce")      ? &o.allreduce
                          : !strcmp(k, "ckpt_dir")       ? &o.ckpt_dir
                          : !strcmp(k, "trace_path")     ? &o.trace_path
                          : !strcmp(k, "grad_compress")  ? &o.grad_compress
                          : !strcmp(k, "slice")          ? &o.slice
                          : !strcmp(k, "slice_registry") ? &o.slice_registry
                                                         : NULL;
        if (sp) {
            if (val == Py_None) continue;
            const char *sv = PyUnicode_Check(val) ? PyUnicode_AsUTF8AndSize(val, NULL) : NULL;
            if (!sv) {
                if (!PyErr_Occurred()) raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s: a string", k);
                goto out;
            }
            if (nstr == TRAIN_STRS || !(strs[nstr] = strdup(sv))) {
                PyErr_NoMemory();
                goto out;
            }
            *sp = strs[nstr++];
            continue;
        }
        if (!strcmp(k, "model") || !strcmp(k, "activation")) {
            const char *sv = PyUnicode_Check(val) ? PyUnicode_AsUTF8AndSize(val, NULL) : NULL;
            int x = !sv           ? -1
                    : k[0] == 'm' ? ot_model_kind_from_name(sv)
                                  : ot_activation_from_name(sv);
            if (x < 0) {
                if (!PyErr_Occurred()) raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s: unknown value", k);
                goto out;
            }
            if (k[0] == 'm')
                o.model.kind = (ot_model_kind)x;
            else
                o.model.activation = (ot_activation)x;
            continue;
        }
        if (!strcmp(k, "ckpt_replicas")) { /* the replica roots (paths) */
            PyObject *rs = PySequence_Fast(val, "ckpt_replicas: a sequence of directories");
            if (!rs) goto out;
            Py_ssize_t nr = PySequence_Size(rs);
            if (nr > TRAIN_MAX_REPLICAS) {
                Py_DECREF(rs);
                raise_fmt(OT_ERR_INVALID_ARGUMENT, "ckpt_replicas: 0..%d copies",
                          TRAIN_MAX_REPLICAS);
                goto out;
            }
            for (Py_ssize_t i = 0; i < nr; i++) {
                PyObject *x = PySequence_GetItem(rs, i);
                const char *sv = x && PyUnicode_Check(x) ? PyUnicode_AsUTF8AndSize(x, NULL) : NULL;
                if (sv && nstr < TRAIN_STRS) strs[nstr] = strdup(sv);
                Py_XDECREF(x);
                if (!sv || nstr == TRAIN_STRS || !strs[nstr]) {
                    Py_DECREF(rs);
                    if (!PyErr_Occurred())
                        raise_fmt(OT_ERR_INVALID_ARGUMENT, "ckpt_replicas: directory names");
                    goto out;
                }
                replicas[i] = strs[nstr++];
            }
            Py_DECREF(rs);
            o.ckpt_replicas = nr ? replicas : NULL;
            o.nckpt_replicas = (int)nr;
            continue;
        }
        if (!strcmp(k, "compile_cache")) { /* True: the default directory; or a directory */
            if (PyUnicode_Check(val)) {
                const char *sv = PyUnicode_AsUTF8AndSize(val, NULL);
                if (!sv || nstr == TRAIN_STRS || !(strs[nstr] = strdup(sv))) {
                    if (!PyErr_Occurred()) PyErr_NoMemory();
                    goto out;
                }
                cache_dir = strs[nstr++];
                use_cache = true;
            } else if (val != Py_None) {
                int t = PyObject_IsTrue(val);
                if (t < 0) goto out;
                use_cache = t;
            }
            continue;
        }
        if (!strcmp(k, "state")) {
            const char *sv = PyUnicode_Check(val) ? PyUnicode_AsUTF8AndSize(val, NULL) : NULL;
            if (!sv || (strcmp(sv, "f32") && strcmp(sv, "bf16") && strcmp(sv, "int8"))) {
                if (!PyErr_Occurred())
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "state: 'f32', 'bf16' or 'int8'");
                goto out;
            }
            o.state_format = !strcmp(sv, "bf16")   ? OT_TPU_STATE_BF16
                             : !strcmp(sv, "int8") ? OT_TPU_STATE_INT8
                                                   : OT_TPU_STATE_F32;
            continue;
        }
        if (!strcmp(k, "overlap")) {
            const char *sv = PyUnicode_Check(val) ? PyUnicode_AsUTF8AndSize(val, NULL) : NULL;
            if (!sv || (strcmp(sv, "auto") && strcmp(sv, "on") && strcmp(sv, "off"))) {
                if (!PyErr_Occurred())
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "overlap: 'auto', 'on' or 'off'");
                goto out;
            }
            o.overlap = !strcmp(sv, "on")    ? OT_OVERLAP_ON
                        : !strcmp(sv, "off") ? OT_OVERLAP_OFF
                                             : OT_OVERLAP_AUTO;
            continue;
        }
        if (!strcmp(k, "hidden")) {
            PyObject *hs = PySequence_Fast(val, "hidden: a sequence of layer widths");
            if (!hs) goto out;
            Py_ssize_t nh = PySequence_Size(hs);
            if (nh < 1 || nh > OT_MODEL_MAX_HIDDEN) {
                Py_DECREF(hs);
                raise_fmt(OT_ERR_INVALID_ARGUMENT, "hidden: 1..%d layers", OT_MODEL_MAX_HIDDEN);
                goto out;
            }
            o.model.nhidden = (int)nh;
            for (Py_ssize_t i = 0; i < nh; i++) {
                PyObject *x = PySequence_GetItem(hs, i);
                o.model.hidden[i] = x ? PyLong_AsLongLong(x) : -1;
                Py_XDECREF(x);
            }
            Py_DECREF(hs);
            if (PyErr_Occurred()) goto out;
            continue;
        }
        bool *bp = !strcmp(k, "resume")            ? &o.resume
                   : !strcmp(k, "fresh")           ? &o.fresh
                   : !strcmp(k, "final_ckpt")      ? &o.final_ckpt
                   : !strcmp(k, "shard_optimizer") ? &o.shard_optimizer
                                                   : NULL;
        if (bp) {
            int t = PyObject_IsTrue(val);
            if (t < 0) goto out;
            *bp = t;
            continue;
        }
        if (!strcmp(k, "lr") || !strcmp(k, "weight_decay")) {
            double d = PyFloat_AsDouble(val);
            if (d == -1.0 && PyErr_Occurred()) goto out;
            *(k[0] == 'l' ? &o.lr : &o.weight_decay) = d;
            continue;
        }
        if (!strcmp(k, "recovery")) {
            const char *sv = PyUnicode_Check(val) ? PyUnicode_AsUTF8AndSize(val, NULL) : NULL;
            if (!sv || (strcmp(sv, "shrink") && strcmp(sv, "restore"))) {
                if (!PyErr_Occurred())
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "recovery: 'shrink' or 'restore'");
                goto out;
            }
            o.recovery = sv[0] == 's' ? OT_RECOVER_SHRINK : OT_RECOVER_RESTORE;
            continue;
        }
        long long x = PyLong_AsLongLong(val);
        if (x == -1 && PyErr_Occurred()) goto out;
        if ((x < INT_MIN || x > INT_MAX) &&
            (!strcmp(k, "devices") || !strcmp(k, "keep") || !strcmp(k, "fail_device") ||
             !strcmp(k, "migrate_device"))) {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s %lld is out of range", k, x);
            goto out;
        }
        if (!strcmp(k, "steps"))
            o.steps = x;
        else if (!strcmp(k, "epochs"))
            o.epochs = x;
        else if (!strcmp(k, "devices"))
            o.devices = (int)x;
        else if (!strcmp(k, "batch_size"))
            o.batch_size = x;
        else if (!strcmp(k, "grad_accum"))
            o.grad_accum = x;
        else if (!strcmp(k, "warmup_steps"))
            o.warmup_steps = x;
        else if (!strcmp(k, "synthetic_n"))
            o.synthetic_n = x;
        else if (!strcmp(k, "local_sgd"))
            o.local_sgd = x;
        else if (!strcmp(k, "ckpt_every"))
            o.ckpt_every = x;
        else if (!strcmp(k, "keep"))
            o.keep = (int)x;
        else if (!strcmp(k, "fail_device"))
            o.fail_device = (int)x;
        else if (!strcmp(k, "fail_step"))
            o.fail_step = x;
        else if (!strcmp(k, "migrate_device"))
            o.migrate_device = (int)x;
        else if (!strcmp(k, "migrate_step"))
            o.migrate_step = x;
        else if (!strcmp(k, "eval_every"))
            o.eval_every = x;
        else if (!strcmp(k, "seed"))
            o.seed = (uint64_t)x;
        else if (!strcmp(k, "stop_after"))
            o.stop_after = x;
        else {
            raise_fmt(OT_ERR_INVALID_ARGUMENT, "train: unknown option '%s'", k);
            goto out;
        }
    }
    train_cb tc = {cb != Py_None ? cb : NULL, false};
    if (tc.cb && !PyCallable_Check(tc.cb)) {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "on_progress: a callable");
        goto out;
    }
    o.on_progress = train_progress;
    o.ud = &tc;
    ot_status st;
    if (use_cache) {
        ot_compile_cache_options cco = {cache_dir, 0};
        if ((st = ot_compile_cache_open(&cco, &cc)) != OT_OK) {
            raise_status(st);
            goto out;
        }
        o.compile_cache = cc;
    }
    Py_BEGIN_ALLOW_THREADS st = ot_train(&o, &rep);
    Py_END_ALLOW_THREADS if (st != OT_OK) {
        raise_status(st);
        goto out;
    }
    char *json = NULL;
    if ((st = ot_train_report_json(&rep, &json)) != OT_OK) {
        raise_status(st);
        goto out;
    }
    ot_model *m = NULL;
    if ((st = ot_model_create(&o.model, &m)) != OT_OK) {
        ot_free(json);
        raise_status(st);
        goto out;
    }
    PyObject *params = PyList_New(rep.nparams);
    for (int i = 0; params && i < rep.nparams; i++) {
        PyObject *a = array_copy_of(&rep.params[i].shape, rep.params[i].data);
        PyObject *t = a ? Py_BuildValue("(sN)", ot_model_param_name(m, i), a) : NULL;
        if (!t) {
            Py_CLEAR(params);
            break;
        }
        PyList_SetItem(params, i, t);
    }
    ot_model_free(m);
    if (params) ret = Py_BuildValue("(sN)", json, params);
    ot_free(json);
out:
    ot_compile_cache_free(cc);
    ot_train_report_clear(&rep);
    for (int i = 0; i < nstr; i++) free(strs[i]);
    return ret;
}

/* ---- learning-rate schedules (optim.h) ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD ot_lr_schedule *s;
} ScheduleObject;

static PyTypeObject *g_sched_type;

static void sched_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    ot_lr_schedule_free(((ScheduleObject *)self)->s);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *sched_call(PyObject *self, PyObject *args, PyObject *kw) {
    long long t;
    if (kw && PyDict_Size(kw)) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "schedule(step)");
    if (!PyArg_ParseTuple(args, "L", &t)) return NULL;
    return PyFloat_FromDouble(ot_lr_schedule_lr(((ScheduleObject *)self)->s, (int64_t)t));
}

static PyObject *sched_get_kind(PyObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(ot_lr_schedule_kind(((ScheduleObject *)self)->s));
}

static PyObject *sched_repr(PyObject *self) {
    return PyUnicode_FromFormat("<optitpu schedule %s>",
                                ot_lr_schedule_kind(((ScheduleObject *)self)->s));
}

static PyGetSetDef sched_getset[] = {
    {"kind", sched_get_kind, NULL, "\"constant\", \"cosine\", ...", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot sched_slots[] = {
    {Py_tp_dealloc, sched_dealloc},
    {Py_tp_call, sched_call},
    {Py_tp_repr, sched_repr},
    {Py_tp_getset, sched_getset},
    {Py_tp_doc, "A learning-rate schedule: schedule(t) is the rate at step index t (0 first)."},
    {0, NULL},
};

static PyType_Spec sched_spec = {"optitpu.Schedule", sizeof(ScheduleObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                 sched_slots};

/* sp, not the pointer: the constructor call in the same argument list sets it, and C leaves the
 * order in which arguments are evaluated open. */
static PyObject *sched_wrap(ot_status st, ot_lr_schedule **sp) {
    if (st != OT_OK) return raise_status(st);
    ot_lr_schedule *s = *sp;
    allocfunc alloc = (allocfunc)PyType_GetSlot(g_sched_type, Py_tp_alloc);
    ScheduleObject *o = (ScheduleObject *)alloc(g_sched_type, 0);
    if (!o) {
        ot_lr_schedule_free(s);
        return NULL;
    }
    o->s = s;
    return (PyObject *)o;
}

#define SCHED_MAX 64

/* A sequence of numbers into a[0..n) (n <= SCHED_MAX); -1 with an exception set. */
static Py_ssize_t doubles_of(PyObject *o, double *a, const char *what) {
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Size(seq);
    if (n > SCHED_MAX) {
        Py_DECREF(seq);
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "%s: at most %d entries", what, SCHED_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(seq, i);
        a[i] = x ? PyFloat_AsDouble(x) : -1;
        Py_XDECREF(x);
    }
    Py_DECREF(seq);
    return PyErr_Occurred() ? -1 : n;
}

/* _core.lr_schedule(kind, *args): the constructors of optim.h, arguments in their order. */
static PyObject *mod_lr_schedule(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_ssize_t n = PyTuple_Size(args);
    if (n < 1) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "lr_schedule(kind, ...)");
    const char *kind = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(args, 0), NULL);
    if (!kind) return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (!rest) return NULL;
    ot_lr_schedule *s = NULL;
    double a, b, c, d, e;
    long long i, j, k;
    int flag;
    PyObject *ret = NULL, *o1, *o2;
    if (!strcmp(kind, "constant")) {
        if (PyArg_ParseTuple(rest, "d", &a)) ret = sched_wrap(ot_lr_schedule_constant(a, &s), &s);
    } else if (!strcmp(kind, "step")) {
        if (PyArg_ParseTuple(rest, "dLd", &a, &i, &b))
            ret = sched_wrap(ot_lr_schedule_step(a, i, b, &s), &s);
    } else if (!strcmp(kind, "exponential")) {
        if (PyArg_ParseTuple(rest, "dLdLpd", &a, &i, &b, &j, &flag, &c))
            ret = sched_wrap(ot_lr_schedule_exponential(a, i, b, j, flag, c, &s), &s);
    } else if (!strcmp(kind, "polynomial")) {
        if (PyArg_ParseTuple(rest, "dddLL", &a, &b, &c, &i, &j))
            ret = sched_wrap(ot_lr_schedule_polynomial(a, b, c, i, j, &s), &s);
    } else if (!strcmp(kind, "linear")) {
        if (PyArg_ParseTuple(rest, "ddLL", &a, &b, &i, &j))
            ret = sched_wrap(ot_lr_schedule_linear(a, b, i, j, &s), &s);
    } else if (!strcmp(kind, "cosine")) {
        if (PyArg_ParseTuple(rest, "ddLd", &a, &b, &i, &c))
            ret = sched_wrap(ot_lr_schedule_cosine(a, b, i, c, &s), &s);
    } else if (!strcmp(kind, "warmup_cosine")) {
        if (PyArg_ParseTuple(rest, "ddLLdd", &a, &b, &i, &j, &c, &d))
            ret = sched_wrap(ot_lr_schedule_warmup_cosine(a, b, i, j, c, d, &s), &s);
    } else if (!strcmp(kind, "cosine_restarts")) {
        if (PyArg_ParseTuple(rest, "ddLL", &a, &b, &i, &j))
            ret = sched_wrap(ot_lr_schedule_cosine_restarts(a, b, i, j, &s), &s);
    } else if (!strcmp(kind, "onecycle")) {
        if (PyArg_ParseTuple(rest, "Lddddp", &k, &a, &b, &c, &d, &flag))
            ret = sched_wrap(ot_lr_schedule_onecycle(k, a, b, c, d, flag, &s), &s);
    } else if (!strcmp(kind, "piecewise_constant")) {
        double bd[SCHED_MAX], sc[SCHED_MAX];
        if (PyArg_ParseTuple(rest, "dOO", &e, &o1, &o2)) {
            Py_ssize_t nb = doubles_of(o1, bd, "boundaries"), ns = doubles_of(o2, sc, "scales");
            if (nb >= 0 && ns >= 0) {
                if (nb != ns) {
                    raise_fmt(OT_ERR_INVALID_ARGUMENT, "%zd boundaries, %zd scales", nb, ns);
                } else {
                    int64_t bi[SCHED_MAX];
                    for (Py_ssize_t q = 0; q < nb; q++) bi[q] = (int64_t)bd[q];
                    ret = sched_wrap(ot_lr_schedule_piecewise_constant(e, bi, sc, (int)nb, &s), &s);
                }
            }
        }
    } else {
        raise_fmt(OT_ERR_INVALID_ARGUMENT, "schedule '%s' is unknown", kind);
    }
    Py_DECREF(rest);
    return ret;
}

/* _core.full(dtype, shape, value, stream=False) -> Array filled with value. stream: memory from
 * ot_stream_alloc (huge-page backed, its start staggered within 4 KiB so that arrays streamed
 * side by side, an optimizer's state beside its parameter, do not alias in the low address bits).
 */
static PyObject *mod_full(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *dt;
    PyObject *dims;
    double value;
    int stream = 0;
    if (!PyArg_ParseTuple(args, "sOd|p", &dt, &dims, &value, &stream)) return NULL;
    ot_dtype t = ot_dtype_from_name(dt, strlen(dt));
    if (t == OT_DTYPE_INVALID) return raise_fmt(OT_ERR_INVALID_ARGUMENT, "unknown dtype '%s'", dt);
    PyObject *seq = PySequence_Fast(dims, "shape: a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t r = PySequence_Size(seq);
    int64_t d[OT_MAX_RANK];
    if (r > OT_MAX_RANK) {
        Py_DECREF(seq);
        return raise_fmt(OT_ERR_INVALID_ARGUMENT, "rank %zd; at most %d", r, OT_MAX_RANK);
    }
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *x = PySequence_GetItem(seq, i);
        d[i] = x ? PyLong_AsLongLong(x) : -1;
        Py_XDECREF(x);
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) return NULL;
    ot_shape s;
    if (ot_shape_make(&s, t, (int)r, d) != OT_OK) return raise_status(OT_ERR_INVALID_ARGUMENT);
    ArrayObject *a = array_new_in(&s, stream);
    if (!a) return NULL;
    int64_t n = ot_shape_numel_unchecked(&s);
    if (value == 0.0) {
        memset(a->data, 0, (size_t)a->nbytes);
    } else if (t == OT_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)a->data)[i] = (float)value;
    } else if (t == OT_F64) {
        for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] = value;
    } else {
        Py_DECREF(a);
        return raise_fmt(OT_ERR_UNIMPLEMENTED, "full: a nonzero value needs f32 or f64");
    }
    return (PyObject *)a;
}

static PyMethodDef mod_methods[] = {
    {"compile", (PyCFunction)(void (*)(void))mod_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(text: bytes, filename=None, opt_level=2, profile=False, cache=None)"},
    {"load", mod_load, METH_VARARGS, "load(path) -> Executable (a file written by save)"},
    {"optimizer_update", (PyCFunction)(void (*)(void))mod_optimizer_update,
     METH_VARARGS | METH_KEYWORDS, "The compiled, donated update of an optimizer."},
    {"version", mod_version, METH_NOARGS, "liboptitpu's version"},
    {"describe", mod_describe, METH_O, "(dtype, shape, address, readonly) as optitpu sees obj"},
    {"copy", mod_copy, METH_O, "A new optitpu.Array holding a copy of obj"},
    {"full", mod_full, METH_VARARGS, "full(dtype, shape, value, stream=False) -> Array"},
    {"st_save", mod_st_save, METH_VARARGS, "st_save(path, {name: array}, metadata=None)"},
    {"st_load", mod_st_load, METH_VARARGS, "st_load(path) -> ({name: Array}, metadata)"},
    {"ckpt_save", mod_ckpt_save, METH_VARARGS,
     "ckpt_save(root, step, {role: {name: array}}, metrics)"},
    {"ckpt_restore", mod_ckpt_restore, METH_VARARGS, "ckpt_restore(root, step_dir|None)"},
    {"ckpt_verify", mod_ckpt_verify, METH_VARARGS, "ckpt_verify(step_dir) -> report"},
    {"lr_schedule", mod_lr_schedule, METH_VARARGS, "lr_schedule(kind, *args) -> Schedule"},
    {"pod_create", mod_pod_create, METH_VARARGS, "pod_create(devices, topology=None)"},
    {"pod_collective", (PyCFunction)(void (*)(void))mod_pod_collective,
     METH_VARARGS | METH_KEYWORDS, "pod_collective(pod, kind, arrays, op, root, algo)"},
    {"train", mod_train, METH_VARARGS, "train(options, on_progress=None) -> (report JSON, params)"},
    {"ckpt_list", mod_ckpt_list, METH_VARARGS,
     "ckpt_list(root) -> [(step, path, committed, damaged)]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "optitpu._core", NULL, -1, mod_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void) {
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (make_errors(m) < 0) goto fail;
    g_array_type = (PyTypeObject *)PyType_FromSpec(&array_spec);
    if (!g_array_type || PyModule_AddObjectRef(m, "Array", (PyObject *)g_array_type) < 0) goto fail;
    g_sched_type = (PyTypeObject *)PyType_FromSpec(&sched_spec);
    if (!g_sched_type || PyModule_AddObjectRef(m, "Schedule", (PyObject *)g_sched_type) < 0)
        goto fail;
    g_pod_type = (PyTypeObject *)PyType_FromSpec(&pod_spec);
    if (!g_pod_type || PyModule_AddObjectRef(m, "PodHandle", (PyObject *)g_pod_type) < 0) goto fail;
    g_exe_type = (PyTypeObject *)PyType_FromSpec(&exe_spec);
    if (!g_exe_type || PyModule_AddObjectRef(m, "Executable", (PyObject *)g_exe_type) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
