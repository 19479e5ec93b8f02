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

void mig_auth_proof(const uint8_t secret[MIG_SECRET_LEN], const uint8_t nonce[MIG_SECRET_LEN],
		    uint64_t session_id, uint16_t channel, uint8_t out[MIG_SECRET_LEN])
{
	static const char label[] = "PCMG-AUTH";
	uint8_t msg[sizeof(label) - 1 + MIG_SECRET_LEN + 8 + 2];
	size_t n = 0;
	memcpy(msg + n, label, sizeof(label) - 1);
	n += sizeof(label) - 1;
	memcpy(msg + n, nonce, MIG_SECRET_LEN);
	n += MIG_SECRET_LEN;
	memcpy(msg + n, &session_id, 8); /* both ends are little-endian (wire.h) */
	n += 8;
	memcpy(msg + n, &channel, 2);
	n += 2;
	unsigned int len = MIG_SECRET_LEN;
	if (!HMAC(EVP_sha256(), secret, MIG_SECRET_LEN, msg, n, out, &len))
		memset(out, 0, MIG_SECRET_LEN); /* never equal to a real proof's HMAC */
}

void mig_auth_thread_cleanup(void)
{
	OPENSSL_thread_stop();
}

int mig_auth_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, MIG_SECRET_LEN) == 0;
}
