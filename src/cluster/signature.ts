/**
 * The signature of the replicas' internal requests (docs/replicas.md, "Next steps": forwarding):
 * HMAC-SHA256 under the cluster secret of the method, the path, a timestamp and the body, sent as
 * `x-mcp-store-cluster-signature: t=<unix ms>,v1=<hex>`. A request is accepted only when its
 * signature matches (compared in constant time) and its timestamp is within 30 s of the receiver's
 * clock, so a request seen on the network cannot be replayed for long nor changed at all.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

/** The header carrying the signature. */
export const SIGNATURE_HEADER = "x-mcp-store-cluster-signature"

/** How far a signed request's timestamp may be from the receiver's clock (ms). */
export const SIGNATURE_WINDOW_MS = 30_000

const digest = (secret: string, method: string, path: string, timestamp: number, body: string | Uint8Array): Buffer =>
  createHmac("sha256", secret).update(`${method.toUpperCase()}\n${path}\n${timestamp}\n`).update(body).digest()

/** The header value signing a request. */
export const sign = (secret: string, method: string, path: string, body: string | Uint8Array, now: number = Date.now()): string =>
  `t=${now},v1=${digest(secret, method, path, now, body).toString("hex")}`

/** Why a request's signature is refused, or undefined when it is valid. */
export const signatureProblem = (
  secret: string,
  method: string,
  path: string,
  body: string | Uint8Array,
  header: string | undefined,
  now: number = Date.now()
): string | undefined => {
  if (header === undefined || header.length > 200) return "no signature"
  const match = /^t=(\d{1,16}),v1=([0-9a-f]{64})$/.exec(header)
  if (match === null) return "malformed signature"
  const timestamp = Number(match[1])
  if (Math.abs(now - timestamp) > SIGNATURE_WINDOW_MS) return "signature outside the time window"
  const expected = digest(secret, method, path, timestamp, body)
  return timingSafeEqual(expected, Buffer.from(match[2] as string, "hex")) ? undefined : "wrong signature"
}
