// SPDX-License-Identifier: GPL-2.0
/* Session secrets, nonces and proofs, with OpenSSL's libcrypto. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "migrate/auth.h"

int mig_random_bytes(void *buf, size_t n, char *err, size_t errlen)
{
	if (RAND_bytes(buf, (int)n) != 1) {
		snprintf(err, errlen, "cannot draw random bytes (OpenSSL RAND_bytes failed)");
		return -EIO;
	}
	return 0;
}

int mig_auth_proof(const uint8_t secret[MIG_SECRET_LEN], int prover,
		   const uint8_t nonce[MIG_SECRET_LEN], uint64_t session_id, uint16_t channel,
		   const uint8_t binding[MIG_SECRET_LEN], uint8_t out[MIG_SECRET_LEN])
{
	const char *label = prover == MIG_ROLE_DEST ? "PCMG-AUTH-DST" : "PCMG-AUTH-SRC";
	uint8_t msg[13 + MIG_SECRET_LEN + 8 + 2 + MIG_SECRET_LEN];
	unsigned int len = MIG_SECRET_LEN;
	size_t n = 0;

	memcpy(msg + n, label, 13);
	n += 13;
	memcpy(msg + n, nonce, MIG_SECRET_LEN);
	n += MIG_SECRET_LEN;
	memcpy(msg + n, &session_id, 8); /* both ends are little-endian (wire.h) */
	n += 8;
	memcpy(msg + n, &channel, 2);
	n += 2;
	memcpy(msg + n, binding, MIG_SECRET_LEN);
	n += MIG_SECRET_LEN;
	if (!HMAC(EVP_sha256(), secret, MIG_SECRET_LEN, msg, n, out, &len) ||
	    len != MIG_SECRET_LEN) {
		OPENSSL_cleanse(msg, sizeof(msg));
		OPENSSL_cleanse(out, MIG_SECRET_LEN);
		return -EIO;
	}
	OPENSSL_cleanse(msg, sizeof(msg)); /* it holds the binding, a TLS exporter value */
	return 0;
}

int mig_auth_check(const uint8_t secret[MIG_SECRET_LEN], int prover,
		   const uint8_t nonce[MIG_SECRET_LEN], uint64_t session_id, uint16_t channel,
		   const uint8_t binding[MIG_SECRET_LEN], const uint8_t proof[MIG_SECRET_LEN])
{
	uint8_t want[MIG_SECRET_LEN];
	int ok = mig_auth_proof(secret, prover, nonce, session_id, channel, binding, want) == 0 &&
		 CRYPTO_memcmp(want, proof, MIG_SECRET_LEN) == 0;

	OPENSSL_cleanse(want, sizeof(want));
	return ok;
}

void mig_auth_wipe(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}

void mig_auth_thread_cleanup(void)
{
	OPENSSL_thread_stop();
}
