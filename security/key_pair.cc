#include "security/key_pair.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace stoke::security {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> Buffer(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's default would ask for a passphrase on the terminal; a server has none to give.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

}  // namespace

absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& cert_path,
                                        const std::string& key_pem, const std::string& key_path) {
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(Buffer(cert_pem).get(), nullptr, NoPassphrase, nullptr));
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(Buffer(key_pem).get(), nullptr, NoPassphrase, nullptr));
  const bool match = cert && key && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();  // the queue would otherwise surface in gRPC's own TLS errors
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert ", cert_path, ": holds no PEM certificate"));
  }
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", key_path, ": holds no PEM private key (or one with a passphrase)"));
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key ", key_path,
                                                   " is not the key of --tls-cert ", cert_path,
                                                   ": their public keys differ"));
  }
  return absl::OkStatus();
}

}  // namespace stoke::security
