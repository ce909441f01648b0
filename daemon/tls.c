/* TLS credentials with reload (tls.h).
 *
 * Invariants: `cert_pem`, `key_pem` and `ca_pem` (NULL without mutual TLS) always
 * hold a set that passed check_set (the certificate parses, the key parses and
 * matches it, the CA holds at least one certificate); `generation` counts the
 * sets, `served` the last one handed to gRPC. The key's text is scrubbed when it
 * is freed.
 */
#include "daemon/tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/pem.h"

struct kilnd_tls_s {
  char *cert_file, *key_file, *ca_file; /* ca_file NULL: no client certificates */
  uv_mutex_t lock;
  char *cert_pem, *key_pem, *ca_pem;
  char describe[512];
  unsigned long generation, served;
};

/* An encrypted key is refused rather than prompting on a terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

static X509 *first_cert(const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, no_passphrase, NULL) : NULL;
  BIO_free(bio);
  return cert;
}

/* subject, serial and expiry of `cert`, for the log. */
static void describe_cert(X509 *cert, char *out, size_t cap) {
  char subject[256] = "";
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
  char *serial = NULL;
  BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(cert), NULL);
  if (bn) serial = BN_bn2hex(bn);
  BN_free(bn);
  char not_after[64] = "";
  BIO *bio = BIO_new(BIO_s_mem());
  if (bio && ASN1_TIME_print(bio, X509_get0_notAfter(cert))) {
    int n = BIO_read(bio, not_after, sizeof not_after - 1);
    not_after[n > 0 ? n : 0] = '\0';
  }
  BIO_free(bio);
  snprintf(out, cap, "%s serial=%s not_after=%s", subject, serial ? serial : "?", not_after);
  OPENSSL_free(serial);
}

/* Checks one set of PEM texts; on success writes its description. */
static KILN_MUST_USE kiln_status_t check_set(const kilnd_tls_t *tls, const char *cert_pem,
                                             const char *key_pem, const char *ca_pem, char *describe,
                                             size_t cap) {
  kiln_status_t status = NULL;
  X509 *cert = first_cert(cert_pem);
  EVP_PKEY *key = NULL;
  if (!cert) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "tls-cert %s: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
                         tls->cert_file);
  }
  if (!status) {
    BIO *bio = BIO_new_mem_buf(key_pem, -1);
    key = bio ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL) : NULL;
    BIO_free(bio);
    if (!key) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "tls-key %s: no usable PEM private key in it (an encrypted key is not "
                           "supported: decrypt it with `openssl pkey`)",
                           tls->key_file);
    }
  }
  if (!status && X509_check_private_key(cert, key) != 1) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "tls-key %s does not match the certificate in tls-cert %s",
                    tls->key_file, tls->cert_file);
  }
  if (!status && ca_pem) {
    X509 *ca = first_cert(ca_pem);
    if (!ca) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "tls-client-ca %s: no PEM certificate in it (expected the CA that signs "
                           "client certificates)",
                           tls->ca_file);
    }
    X509_free(ca);
  }
  if (!status) describe_cert(cert, describe, cap);
  ERR_clear_error(); /* OpenSSL's queue is per thread: leave it empty */
  X509_free(cert);
  EVP_PKEY_free(key);
  return status;
}

/* Reads and checks the files; on success installs them as the next generation. */
static KILN_MUST_USE kiln_status_t load(kilnd_tls_t *tls) {
  char *cert = NULL, *key = NULL, *ca = NULL;
  char describe[sizeof tls->describe];
  kiln_status_t status = kiln_pem_read("tls-cert", tls->cert_file, &cert);
  if (!status) status = kiln_pem_read("tls-key", tls->key_file, &key);
  if (!status && tls->ca_file) status = kiln_pem_read("tls-client-ca", tls->ca_file, &ca);
  if (!status) status = check_set(tls, cert, key, ca, describe, sizeof describe);
  if (status) {
    kiln_free(cert);
    kiln_pem_free(key);
    kiln_free(ca);
    return status;
  }
  uv_mutex_lock(&tls->lock);
  char *old_cert = tls->cert_pem, *old_key = tls->key_pem, *old_ca = tls->ca_pem;
  tls->cert_pem = cert;
  tls->key_pem = key;
  tls->ca_pem = ca;
  memcpy(tls->describe, describe, sizeof describe);
  tls->generation++;
  uv_mutex_unlock(&tls->lock);
  kiln_free(old_cert);
  kiln_pem_free(old_key);
  kiln_free(old_ca);
  return NULL;
}

static bool set(const char *s) { return s && *s; }

kiln_status_t kilnd_tls_create(const char *cert_file, const char *key_file, const char *client_ca_file,
                               kilnd_tls_t **out_tls) {
  *out_tls = NULL;
  if (!set(cert_file) && !set(key_file) && !set(client_ca_file)) return NULL;
  if (set(cert_file) != set(key_file)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s is set but %s is not: TLS needs both the certificate (tls-cert) and its "
                       "private key (tls-key)",
                       set(cert_file) ? "tls-cert" : "tls-key", set(cert_file) ? "tls-key" : "tls-cert");
  }
  if (!set(cert_file)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "tls-client-ca is set but tls-cert and tls-key are not: mutual TLS needs the "
                       "server's own certificate and key too");
  }
  kilnd_tls_t *tls = kiln_calloc(1, sizeof *tls);
  tls->cert_file = kiln_strdup(cert_file);
  tls->key_file = kiln_strdup(key_file);
  tls->ca_file = set(client_ca_file) ? kiln_strdup(client_ca_file) : NULL;
  uv_mutex_init(&tls->lock);
  kiln_status_t status = load(tls);
  if (status) {
    kilnd_tls_destroy(tls);
    return status;
  }
  *out_tls = tls;
  return NULL;
}

kiln_status_t kilnd_tls_reload(kilnd_tls_t *tls) { return load(tls); }

bool kilnd_tls_mutual(const kilnd_tls_t *tls) { return tls && tls->ca_file; }

void kilnd_tls_describe(kilnd_tls_t *tls, char *out, size_t cap) {
  uv_mutex_lock(&tls->lock);
  snprintf(out, cap, "%s", tls->describe);
  uv_mutex_unlock(&tls->lock);
}

/* gRPC's threads, at every handshake: a new config only after a reload. gRPC
 * takes the config (and destroys it); it copies the strings. */
static grpc_ssl_certificate_config_reload_status fetch(void *user,
                                                       grpc_ssl_server_certificate_config **config) {
  kilnd_tls_t *tls = user;
  grpc_ssl_certificate_config_reload_status result = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  uv_mutex_lock(&tls->lock);
  if (tls->served != tls->generation) {
    grpc_ssl_pem_key_cert_pair pair = {tls->key_pem, tls->cert_pem};
    /* gRPC 1.51 asserts that a fetched config has root certificates even when no
     * client certificate is requested; they are unused then, so the server's own
     * chain stands in. */
    *config = grpc_ssl_server_certificate_config_create(tls->ca_pem ? tls->ca_pem : tls->cert_pem, &pair, 1);
    tls->served = tls->generation;
    result = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
  }
  uv_mutex_unlock(&tls->lock);
  return result;
}

grpc_server_credentials *kilnd_tls_server_credentials(kilnd_tls_t *tls) {
  grpc_ssl_client_certificate_request_type request =
      tls->ca_file ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  grpc_ssl_server_credentials_options *options =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(request, fetch, tls);
  return grpc_ssl_server_credentials_create_with_options(options);
}

void kilnd_tls_destroy(kilnd_tls_t *tls) {
  if (!tls) return;
  uv_mutex_destroy(&tls->lock);
  kiln_free(tls->cert_pem);
  kiln_pem_free(tls->key_pem);
  kiln_free(tls->ca_pem);
  kiln_free(tls->cert_file);
  kiln_free(tls->key_file);
  kiln_free(tls->ca_file);
  kiln_free(tls);
}
