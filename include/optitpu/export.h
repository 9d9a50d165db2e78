/* Symbol visibility for liboptitpu. The library is built with -fvisibility=hidden; only
 * declarations marked OT_API are exported from the shared object. */
#ifndef OPTITPU_EXPORT_H
#define OPTITPU_EXPORT_H

#if defined(_WIN32)
#if defined(OPTITPU_BUILDING)
#define OT_API __declspec(dllexport)
#else
#define OT_API
#endif
#elif defined(__GNUC__)
#define OT_API __attribute__((visibility("default")))
#else
#define OT_API
#endif

#endif /* OPTITPU_EXPORT_H */
