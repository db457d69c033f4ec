/**
 * The signature of the replicas' internal requests (docs/replicas.md, "Next steps": forwarding):
 * HMAC-SHA256 under the cluster secret of the method, the path, a timestamp and the body, sent as
 * `x-mcp-store-cluster-signature: t=<unix ms>,h1=<hex>,v1=<hex>`. A request is accepted only when its
 * signature matches (compared in constant time) and its timestamp is within 30 s of the receiver's
 * clock, so a request seen on the network cannot be replayed for long nor changed at all. `h1`
 * signs the same but for the body, its length instead: checked before any of the body is read
 * (`headProblem`), so that nobody without the secret makes a replica read and hold a body.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

/** The header carrying the signature. */
export const SIGNATURE_HEADER = "x-mcp-store-cluster-signature"

/** How far a signed request's timestamp may be from the receiver's clock (ms). */
export const SIGNATURE_WINDOW_MS = 30_000

const digest = (secret: string, method: string, path: string, timestamp: number, body: string | Uint8Array): Buffer =>
  createHmac("sha256", secret).update(`${method.toUpperCase()}\n${path}\n${timestamp}\n`).update(body).digest()

/** The signature of a request's head: method, path, timestamp and the body's length in bytes. */
const headDigest = (secret: string, method: string, path: string, timestamp: number, length: number): Buffer =>
  createHmac("sha256", secret).update(`head\n${method.toUpperCase()}\n${path}\n${timestamp}\n${length}`).digest()

/** The header value signing a request. */
export const sign = (secret: string, method: string, path: string, body: string | Uint8Array, now: number = Date.now()): string =>
  `t=${now},h1=${headDigest(secret, method, path, now, Buffer.byteLength(body)).toString("hex")},v1=${digest(secret, method, path, now, body).toString("hex")}`

const HEADER = /^t=(\d{1,16}),h1=([0-9a-f]{64}),v1=([0-9a-f]{64})$/

/**
 * Why a request's head is refused before its body is read (no signature, malformed, out of the
 * time window, or a head signature that does not match its method, path and `length`), or
 * undefined when the body may be read and checked (`signatureProblem`).
 */
export const headProblem = (secret: string, method: string, path: string, length: number, header: string | undefined, now: number = Date.now()): string | undefined => {
  if (header === undefined || header.length > 300) return "no signature"
  const match = HEADER.exec(header)
  if (match === null) return "malformed signature"
  const timestamp = Number(match[1])
  if (Math.abs(now - timestamp) > SIGNATURE_WINDOW_MS) return "signature outside the time window"
  return timingSafeEqual(headDigest(secret, method, path, timestamp, length), Buffer.from(match[2] as string, "hex")) ? undefined : "wrong signature"
}

/** Why a request's signature is refused, or undefined when it is valid. */
export const signatureProblem = (
  secret: string,
  method: string,
  path: string,
  body: string | Uint8Array,
  header: string | undefined,
  now: number = Date.now()
): string | undefined => {
  const head = headProblem(secret, method, path, Buffer.byteLength(body), header, now)
  if (head !== undefined) return head
  const match = HEADER.exec(header as string) as RegExpExecArray
  const expected = digest(secret, method, path, Number(match[1]), body)
  return timingSafeEqual(expected, Buffer.from(match[3] as string, "hex")) ? undefined : "wrong signature"
}
