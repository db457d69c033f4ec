/**
 * A budget of requests per client address for the authorization server's open routes that keep
 * something: an authorization request (a consent waiting for the operator, or a code) and a
 * registration. Each of those is capped store-wide with the oldest dropped, so without a budget
 * anyone who reaches the store could flood them and crowd out other people's flows under way.
 *
 * A token bucket per address: `perMinute` requests at once, refilled at `perMinute` a minute. An
 * IPv6 address counts by its /64 (a host is given the whole prefix); an IPv4-mapped one as IPv4.
 * At most `MAX_ADDRESSES` buckets are kept, the least recently used forgotten (an address forgotten
 * starts full again): memory stays bounded however many addresses ask.
 *
 * The address is the peer's, but behind a reverse proxy on the same machine (a loopback peer) the
 * last of `X-Forwarded-For`: the one that proxy appended, the address it took the request from (what
 * a client writes there itself stands before it). A peer elsewhere is never taken at its word.
 */
import { isIP, isIPv4, isIPv6 } from "node:net"
import { isLoopback } from "../request-guard.js"

/** Buckets kept at most. */
export const MAX_ADDRESSES = 10_000

interface Bucket {
  tokens: number
  /** performance.now() of the last refill. */
  at: number
  /** The address was told once that its budget is spent (one log line a spell). */
  refused: boolean
}

/** The key an address is counted under: IPv4 as it is, IPv6 by its first 64 bits, anything else as it is. */
export const addressKey = (address: string): string => {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1]
  if (mapped !== undefined && isIPv4(mapped)) return mapped
  if (!isIPv6(address)) return address
  const [head = "", tail] = address.toLowerCase().split("%", 1)[0]!.split("::")
  const front = head === "" ? [] : head.split(":")
  const back = tail === undefined || tail === "" ? [] : tail.split(":")
  // An embedded IPv4 tail (counted as one group here) lies past the first 64 bits whatever it counts as.
  const groups = tail === undefined ? front : [...front, ...Array<string>(Math.max(0, 8 - front.length - back.length)).fill("0"), ...back]
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`
}

/** The address a request counts under: its peer's, or behind a proxy on this machine the one that proxy saw. */
export const budgetAddress = (peer: string, forwardedFor: string | undefined): string => {
  if (!isLoopback(peer) || forwardedFor === undefined) return peer
  const last = forwardedFor.split(",").at(-1)?.trim() ?? ""
  return isIP(last) !== 0 ? last : peer
}

/** What `take` decided: allowed, or refused with the seconds until one more request is (and whether it is the first refusal of the spell). */
export type Taken = { readonly allowed: true } | { readonly allowed: false; readonly retryAfterSeconds: number; readonly first: boolean }

export class AddressBudget {
  private readonly buckets = new Map<string, Bucket>()

  constructor(
    private readonly perMinute: number,
    private readonly now: () => number = () => performance.now()
  ) {}

  /** Spends one request of `address`'s budget, if it has one left. */
  take(address: string): Taken {
    const key = addressKey(address)
    const now = this.now()
    const rate = this.perMinute / 60_000
    const found = this.buckets.get(key)
    const bucket = found ?? { tokens: this.perMinute, at: now, refused: false }
    bucket.tokens = Math.min(this.perMinute, bucket.tokens + (now - bucket.at) * rate)
    bucket.at = now
    // Most recently used last: the first one is the one to forget.
    this.buckets.delete(key)
    this.buckets.set(key, bucket)
    if (found === undefined && this.buckets.size > MAX_ADDRESSES) this.buckets.delete(this.buckets.keys().next().value as string)
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      bucket.refused = false
      return { allowed: true }
    }
    const first = !bucket.refused
    bucket.refused = true
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / rate / 1000)), first }
  }

  /** Addresses with a bucket (for tests of the bound). */
  get size(): number {
    return this.buckets.size
  }
}
