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
 * The address is the peer's, but a peer on a loopback or private address (a reverse proxy: on the
 * same machine, or an ingress inside the network) is taken to be a proxy, and `X-Forwarded-For` is
 * read from its end: the last address there that is not itself loopback or private is the client
 * (what a client writes there itself stands before what the proxies appended), or, every one being
 * private, the first. A peer on a public address is never taken at its word. (The rule of Rails'
 * RemoteIp. A host inside the network can so get fresh budgets; the budget is a brake on floods
 * from outside, not an access control.)
 */
import { BlockList, isIP, isIPv4, isIPv6 } from "node:net"
import { unmapped } from "../../mcp/upstream-policy.js"
import { capped } from "./grant-state.js"

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
  const plain = unmapped(address)
  if (isIPv4(plain)) return plain
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

/** Loopback, private and link-local networks: where a reverse proxy in front of the store is. */
const PROXY_NETWORKS = (() => {
  const networks = new BlockList()
  for (const [net, bits] of [["127.0.0.0", 8], ["10.0.0.0", 8], ["172.16.0.0", 12], ["192.168.0.0", 16], ["169.254.0.0", 16]] as const) networks.addSubnet(net, bits, "ipv4")
  for (const [net, bits] of [["::1", 128], ["fc00::", 7], ["fe80::", 10]] as const) networks.addSubnet(net, bits, "ipv6")
  return networks
})()

/** Whether an address may be a proxy's (loopback, private or link-local; an IPv4-mapped one as IPv4). */
const mayBeProxy = (address: string): boolean => {
  const plain = unmapped(address).split("%", 1)[0]!
  const kind = isIP(plain)
  return kind !== 0 && PROXY_NETWORKS.check(plain, kind === 4 ? "ipv4" : "ipv6")
}

/** The address a request counts under: its peer's, or behind proxies the client they name (see above). */
export const budgetAddress = (peer: string, forwardedFor: string | undefined): string => {
  if (forwardedFor === undefined || !mayBeProxy(peer)) return peer
  const chain = forwardedFor
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => isIP(entry) !== 0)
  return chain.findLast((address) => !mayBeProxy(address)) ?? chain[0] ?? peer
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
    capped(this.buckets, MAX_ADDRESSES)
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
