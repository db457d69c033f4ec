/**
 * The ES256 key the built-in authorization server signs its access tokens with, kept across
 * restarts (a restart must not void every token given out): `<services file>.oauth-server.key`,
 * 0600, the private JWK sealed with AES-256-GCM under a sub-key of the store's one secret
 * (MCPSTORE_SECRET_KEY or `<services file>.key`, src/config/token-vault.ts). Made on first use.
 * In replica mode one key for the cluster, in its Redis (`oauth-server:key`), sealed the same way
 * under MCPSTORE_SECRET_KEY (which every replica shares) and made once: the first replica's
 * `SET NX` wins and every replica uses the key stored.
 */
import { hkdfSync } from "node:crypto"
import { readFile } from "node:fs/promises"
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from "jose"
import { writeAtomically } from "./atomic-write.js"
import { clusterKey } from "../redis/key-names.js"
import type { ClusterData } from "../records/redis-records.js"
import { keyFileOf, seal, storeSecret, unseal } from "./token-vault.js"

/** The signing key, its public JWK (with `kid`, `alg`, `use`) for the JWKS. */
export interface SigningKey {
  readonly privateKey: CryptoKey
  readonly publicJwk: JWK
  readonly kid: string
}

/** The key file beside a services file. */
export const signingKeyFileOf = (servicesFile: string): string => `${servicesFile}.oauth-server.key`

const sealingKey = (secret: Buffer): Buffer => Buffer.from(hkdfSync("sha256", secret, "mcp-store", "oauth-server-signing-key", 32))

const fromPrivateJwk = async (jwk: JWK): Promise<SigningKey> => {
  const { d: _d, ...pub } = jwk
  const kid = await calculateJwkThumbprint(pub)
  const privateKey = (await importJWK(jwk, "ES256")) as CryptoKey
  return { privateKey, publicJwk: { kty: pub.kty, crv: pub.crv, x: pub.x, y: pub.y, kid, alg: "ES256", use: "sig" } as JWK, kid }
}

/** The store's signing key: read from its file, or made and written (0600) on first use. */
export const loadSigningKey = async (servicesFile: string): Promise<SigningKey> => {
  const secret = await storeSecret(keyFileOf(servicesFile), true)
  if (secret === undefined) throw new Error("no store secret to seal the signing key with")
  const key = sealingKey(secret.secret)
  const path = signingKeyFileOf(servicesFile)
  let text: string | undefined
  try {
    text = await readFile(path, "utf8")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e
  }
  if (text !== undefined) {
    let jwk: JWK
    try {
      jwk = JSON.parse(unseal(key, text)) as JWK
    } catch {
      throw new Error(`the signing key file ${path} cannot be opened with the store's secret (MCPSTORE_SECRET_KEY or ${keyFileOf(servicesFile)} changed?); move it away to make a new key`)
    }
    return fromPrivateJwk(jwk)
  }
  const { privateKey } = await generateKeyPair("ES256", { extractable: true })
  const jwk = await exportJWK(privateKey)
  await writeAtomically(path, seal(key, JSON.stringify(jwk)))
  return fromPrivateJwk(jwk)
}

/** The cluster's signing key: read from its Redis, or made and stored there once (set-if-absent). */
export const loadClusterSigningKey = async (data: ClusterData, secretText: string | undefined = process.env["MCPSTORE_SECRET_KEY"]): Promise<SigningKey> => {
  if (secretText === undefined || secretText === "") {
    throw new Error("--auth-server in replica mode seals its signing key with MCPSTORE_SECRET_KEY: set it to the same secret on every replica")
  }
  const key = sealingKey(Buffer.from(secretText, "utf8"))
  const name = clusterKey(data.cluster, "oauth-server", "key")
  const { privateKey } = await generateKeyPair("ES256", { extractable: true })
  await data.client.set(name, seal(key, JSON.stringify(await exportJWK(privateKey))), { condition: "NX" })
  const text = await data.client.get(name)
  if (text === null) throw new Error(`the cluster's signing key (${name}) is gone from Redis`)
  let jwk: JWK
  try {
    jwk = JSON.parse(unseal(key, text)) as JWK
  } catch {
    throw new Error(`the cluster's signing key (${name}) cannot be opened with MCPSTORE_SECRET_KEY: give every replica the same secret, or delete the key to make a new one`)
  }
  return fromPrivateJwk(jwk)
}
