/* SHA-256 through OpenSSL's EVP interface (uses SHA-NI / AVX2 where the CPU has them). */
#include "optitpu/core.h"

#include <openssl/evp.h>

ot_status ot_sha256_init(ot_sha256 *h) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c) return ot_error(OT_ERR_OUT_OF_MEMORY, "sha256: EVP_MD_CTX_new failed");
    if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return ot_error(OT_ERR_INTERNAL, "sha256: EVP_DigestInit_ex failed");
    }
    h->evp = c;
    return OT_OK;
}

ot_status ot_sha256_update(ot_sha256 *h, const void *data, size_t len) {
    if (!h->evp) return ot_error(OT_ERR_INVALID_ARGUMENT, "sha256: context not initialized");
    if (len && EVP_DigestUpdate((EVP_MD_CTX *)h->evp, data, len) != 1)
        return ot_error(OT_ERR_INTERNAL, "sha256: EVP_DigestUpdate failed");
    return OT_OK;
}

ot_status ot_sha256_final(ot_sha256 *h, uint8_t out[32]) {
    EVP_MD_CTX *c = h->evp;
    h->evp = NULL;
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "sha256: context not initialized");
    ot_status rc = OT_OK;
    if (out) {
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(c, out, &n) != 1 || n != 32)
            rc = ot_error(OT_ERR_INTERNAL, "sha256: EVP_DigestFinal_ex failed");
    }
    EVP_MD_CTX_free(c);
    return rc;
}

ot_status ot_sha256_digest(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return ot_error(OT_ERR_INTERNAL, "sha256: EVP_Digest failed");
    return OT_OK;
}

void ot_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}
