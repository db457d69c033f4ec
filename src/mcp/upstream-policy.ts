/**
 * Where remote services may point (the outbound policy). A definition is chosen by whoever
 * may add services, and the store then sends requests from inside its network: without a policy it
 * is a server-side request forgery helper. Two rules:
 *
 * - link-local and cloud metadata addresses (169.254.0.0/16, fd00:ec2::254, fe80::/10) are refused
 *   unless `allowMetadata` (`--upstream-allow-metadata`);
 * - with `--upstream-allow` (CIDRs, addresses and host globs, picomatch syntax), a service's host
 *   must match a glob, or every address it resolves to must be in one of the CIDRs.
 *
 * The check runs on the addresses the connection actually uses: `lookup` is given to node:http
 * (the Streamable HTTP transport), so a name that resolves to an allowed address when checked and to
 * another when connecting (DNS rebinding) is checked again on each resolution. IP literals never
 * reach a lookup: `checkUrl` checks them before connecting.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns"
import { BlockList, isIP, type LookupFunction } from "node:net"
import picomatch from "picomatch"

export interface UpstreamPolicyOptions {
  /** `--upstream-allow`: CIDRs, addresses and host globs; undefined or empty: every address but the metadata ones. */
  readonly allow?: ReadonlyArray<string> | undefined
  /** `--upstream-allow-metadata`: let services point at link-local and cloud metadata addresses. */
  readonly allowMetadata?: boolean | undefined
}

/** A refused upstream: the message names the host and address, and the option that would allow it. */
export class UpstreamRefused extends Error {
  readonly _tag = "UpstreamRefused"
  readonly code = "EUPSTREAMREFUSED"
}

const METADATA = new BlockList()
METADATA.addSubnet("169.254.0.0", 16, "ipv4")
METADATA.addSubnet("fe80::", 10, "ipv6")
METADATA.addAddress("fd00:ec2::254", "ipv6")

const family = (address: string): "ipv4" | "ipv6" => (isIP(address) === 6 ? "ipv6" : "ipv4")

/** `::ffff:a.b.c.d` is the IPv4 address it maps. */
export const unmapped = (address: string): string => {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  return m ? m[1]! : address
}

/** Why an `--upstream-allow` entry is not usable, or undefined when it is (a CIDR, an address or a host glob). */
export const allowEntryProblem = (entry: string): string | undefined => {
  if (entry.trim() === "") return "is empty"
  const slash = entry.indexOf("/")
  if (slash >= 0) {
    const net = entry.slice(0, slash)
    const bits = Number(entry.slice(slash + 1))
    const kind = isIP(net)
    if (kind === 0 || !Number.isInteger(bits) || bits < 0 || bits > (kind === 4 ? 32 : 128)) return "is not a CIDR (e.g. 10.0.0.0/8, fd00::/8)"
    return undefined
  }
  return /^[A-Za-z0-9.*?_\-[\]{}:,!]+$/.test(entry) ? undefined : "is not an address, a CIDR or a host glob"
}

/** The compiled policy: what a connection checks. */
export class UpstreamPolicy {
  private readonly nets: BlockList | undefined
  private readonly hostMatch: ((host: string) => boolean) | undefined

  constructor(readonly options: UpstreamPolicyOptions = {}) {
    const entries = options.allow ?? []
    if (entries.length === 0) return
    const nets = new BlockList()
    const globs: Array<string> = []
    for (const entry of entries) {
      const slash = entry.indexOf("/")
      if (slash >= 0) nets.addSubnet(entry.slice(0, slash), Number(entry.slice(slash + 1)), family(entry.slice(0, slash)))
      else if (isIP(entry) !== 0) nets.addAddress(entry, family(entry))
      else globs.push(entry.toLowerCase())
    }
    this.nets = nets
    this.hostMatch = globs.length === 0 ? () => false : picomatch(globs, { nocase: true, dot: true })
  }

  /** Why `address` (resolved from `host`) is refused, or undefined when it is allowed. */
  refusal(host: string, address: string): string | undefined {
    const a = unmapped(address)
    if (!this.options.allowMetadata && METADATA.check(a, family(a))) {
      return `${host} (${a}) is a link-local or cloud metadata address, refused (--upstream-allow-metadata allows it)`
    }
    if (this.nets === undefined) return undefined
    const bare = host.replace(/^\[|\]$/g, "").toLowerCase()
    if (this.hostMatch?.(bare) === true || this.nets.check(a, family(a))) return undefined
    return `${host} (${a}) is not in --upstream-allow`
  }

  /** Checks a URL whose host is an IP literal (a name is checked by `lookup` as it is resolved); throws `UpstreamRefused`. */
  checkUrl(url: URL): void {
    const host = url.hostname.replace(/^\[|\]$/g, "")
    if (isIP(host) !== 0) this.throwIfRefused(url.hostname, host)
  }

  /** Resolves `url`'s host and checks every address (for transports that cannot be given `lookup`). */
  async checkResolved(url: URL): Promise<void> {
    const host = url.hostname.replace(/^\[|\]$/g, "")
    if (isIP(host) !== 0) return this.throwIfRefused(url.hostname, host)
    const addresses = await new Promise<ReadonlyArray<LookupAddress>>((resolve, reject) =>
      dnsLookup(host, { all: true }, (error, found) => (error ? reject(error) : resolve(found)))
    )
    for (const { address } of addresses) this.throwIfRefused(host, address)
  }

  /**
   * fetch, the URL's host resolved and checked first (`checkResolved`): fetch cannot be given a
   * lookup without undici's Agent. For the SDK's SSE transport and the OAuth requests.
   */
  readonly fetch: typeof fetch = (input, init) =>
    this.checkResolved(new URL(input instanceof Request ? input.url : String(input))).then(() => globalThis.fetch(input, init))

  private throwIfRefused(host: string, address: string): void {
    const why = this.refusal(host, address)
    if (why !== undefined) throw new UpstreamRefused(`upstream refused: ${why}`)
  }

  /** A `lookup` for node:http and node:net that resolves every address and refuses the whole name if one is refused. */
  readonly lookup: LookupFunction = (hostname: string, options: LookupOptions, callback: (...args: Array<never>) => void) => {
    const done = callback as unknown as (error: NodeJS.ErrnoException | null, address: string | ReadonlyArray<LookupAddress>, family?: number) => void
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return done(error, "")
      for (const { address } of addresses) {
        const why = this.refusal(hostname, address)
        if (why !== undefined) return done(new UpstreamRefused(`upstream refused: ${why}`), "")
      }
      if (options.all === true) return done(null, addresses)
      const first = addresses[0]
      return first === undefined ? done(Object.assign(new Error(`${hostname}: no address`), { code: "ENOTFOUND" }), "") : done(null, first.address, first.family)
    })
  }
}

/** The default policy: metadata addresses refused, everything else allowed. */
export const DEFAULT_UPSTREAM_POLICY = new UpstreamPolicy()
