/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD (unreliable datagram) QPs of the mlx5 device model: CREATE_QP with qpc.st UD, a Q_Key in
 * the QP context, and SEND / SEND with immediate whose destination each WQE names in its
 * datagram segment (prm::wqe_datagram, mlx5dv.h struct mlx5_wqe_av). doc/device-model.md ("UD
 * QPs") lists the rules and counters, doc/roce.md the packets.
 *
 *   send WQE: | ctrl (SEND / SEND_IMM) | datagram seg (48 B) | data segs or inline data |
 *       |  Q_Key with bit 31 set -> the QP's own Q_Key (IBTA 10.2.5)
 *       |  payload above the QP's MTU -> LOCAL_LENGTH_ERR, nothing sent (see ud_send)
 *       v
 *   port on the UDP wire, no force loopback: one UD_SEND_ONLY[_WITH_IMMEDIATE] packet
 *       (BTH + DETH [+ ImmDt]) to the datagram segment's GID; the send completes at once
 *   otherwise (the loopback): the QP the segment names, on either port, receives it
 *
 *   QP 1 (prm::gsi): the port's GSI QP (CREATE_QP st QP1, one per port from its RST2INIT to
 *   its 2RST). A datagram to QP 1 goes to the GSI QP of the port it arrives at: the wire's
 *   receiving port, or on the loopback the other port (the same on a one-port device); none
 *   there: dropped (ud_dropped, the wire's rx_dropped). A GSI QP's datagrams carry source QP 1.
 *   Its Q_Key 0x80010000 is checked as any other QP's.
 *
 *   receive: UD QP in RTR or RTS with an RQ? --no--> dropped (ud_dropped)
 *            DETH Q_Key == the QP's q_key?   --no--> dropped (ud_qkey_dropped)
 *            a receive WQE posted?           --no--> dropped (ud_no_recv; no RNR in UD)
 *            40 + payload <= the WQE's bytes? -no--> LOCAL_LENGTH_ERR on the receiver only
 *            GRH (40 bytes) then the payload scattered; CQE RESP_SEND[_IMM], byte_cnt =
 *            payload + 40, flags_rqpn = source QP, GRH present, L3 type IPv4 / IPv6
 *
 * No ACK, no retransmission, no PSN check (IBTA 9.7: UD is unacknowledged and a UD responder
 * accepts any PSN). Every send that passes its local checks completes successfully whatever
 * happens to the datagram, as on a ConnectX.
 *
 * Device hot path: no allocation, no system call beyond the wire's send; the QP's lock held.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cstring>

#include "emu_mlx5_dp_impl.h"
#include "roce_packet.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
using namespace wqe_fmt;

/* A datagram on its way to a UD QP: what the receiver's CQE and buffer get. */
struct EmuDataPath::UdDatagram {
	uint32_t q_key = 0;
	uint32_t src_qpn = 0;
	bool has_imm = false;
	uint32_t imm = 0;
	uint8_t grh[40] = {};
	uint8_t l3_hdr_type = 0; /* MLX5_CQE_L3_HDR_TYPE_IPV4 / _IPV6 */
	std::span<const uint8_t> payload;
};

namespace {

constexpr size_t kGrh = 40;

/* The 16-bit one's complement sum of an IPv4 header (RFC 791, RFC 1071). */
uint16_t ipv4_checksum(const uint8_t *h) noexcept
{
	uint32_t sum = 0;
	for (size_t i = 0; i < roce::ipv4::size; i += 2)
		sum += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
	while (sum >> 16 != 0)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

/*
 * The 40 bytes a UD receive buffer starts with on RoCEv2 (IBTA annex A17.4.5.1; Linux
 * include/rdma/ib_verbs.h union rdma_network_hdr, filled by rxe_resp.c send_data_in for UD
 * QPs): over IPv4, 20 bytes of zero then the IPv4 header; over IPv6, the IPv6 header. The
 * header is the one the datagram of datagram_len bytes (BTH to ICRC) travelled in, path seen
 * from the sender (src). What a UDP socket does not show is written as a sender sets it: TOS /
 * traffic class and flow label 0, TTL / hop limit 64. Returns the CQE's L3 header type.
 */
uint8_t make_grh(const roce::IpPath &path, size_t datagram_len, uint8_t *out) noexcept
{
	std::memset(out, 0, kGrh);
	if (!path.ipv6) {
		uint8_t *ip = out + kGrh - roce::ipv4::size;
		prm::set(ip, roce::ipv4::version, 4);
		prm::set(ip, roce::ipv4::ihl, roce::ipv4::size / 4);
		prm::set(ip, roce::ipv4::total_length,
			 roce::ipv4::size + roce::udp::size + datagram_len);
		prm::set(ip, roce::ipv4::id, path.ipv4_id);
		prm::set(ip, roce::ipv4::flags_frag, path.ipv4_df ? roce::ipv4::flag_df : 0);
		prm::set(ip, roce::ipv4::ttl, 64);
		prm::set(ip, roce::ipv4::protocol, roce::ipv4::protocol_udp);
		std::memcpy(ip + prm::byte_offset(roce::ipv4::src), path.src.data(), 4);
		std::memcpy(ip + prm::byte_offset(roce::ipv4::dst), path.dst.data(), 4);
		prm::set(ip, roce::ipv4::checksum, ipv4_checksum(ip));
		return MLX5_CQE_L3_HDR_TYPE_IPV4;
	}
	prm::set(out, roce::ipv6::version, 6);
	prm::set(out, roce::ipv6::payload_length, roce::udp::size + datagram_len);
	prm::set(out, roce::ipv6::next_header, roce::ipv4::protocol_udp);
	prm::set(out, roce::ipv6::hop_limit, 64);
	std::memcpy(out + roce::ipv6::src_byte, path.src.data(), 16);
	std::memcpy(out + roce::ipv6::dst_byte, path.dst.data(), 16);
	return MLX5_CQE_L3_HDR_TYPE_IPV6;
}

/* Whether a GID is IPv4-mapped (::ffff:a.b.c.d): the RoCEv2 GID of an IPv4 address. */
bool ipv4_mapped(const uint8_t *gid) noexcept
{
	static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return std::memcmp(gid, prefix, sizeof(prefix)) == 0;
}

/* The path of a loopback datagram from GID src to GID dst (IPv4 when dst is IPv4-mapped). */
roce::IpPath loopback_path(const uint8_t *src, const uint8_t *dst) noexcept
{
	roce::IpPath p;
	p.ipv6 = !ipv4_mapped(dst);
	if (p.ipv6) {
		std::memcpy(p.src.data(), src, 16);
		std::memcpy(p.dst.data(), dst, 16);
	} else {
		std::memcpy(p.src.data(), src + 12, 4);
		std::memcpy(p.dst.data(), dst + 12, 4);
	}
	p.src_port = roce::udp_port;
	return p;
}

} // namespace

/*
 * A UD QP's send WQE. The message limit is the QP's path MTU (INIT2RTR's qpc.mtu; Linux mlx5
 * sets 4096 for UD QPs, qp.c __mlx5_ib_modify_qp). IBTA C10-93.1.1 lets a CI drop a longer
 * message without an error, and Linux rxe does so (rxe_req.c, a faked successful UD send); this
 * model completes it with LOCAL_LENGTH_ERR instead, so that a caller learns it, and sends
 * nothing.
 */
uint8_t EmuDataPath::Exec::ud_send()
{
	if (c.opcode != MLX5_OPCODE_SEND && c.opcode != MLX5_OPCODE_SEND_IMM)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR; /* UD sends messages only (IBTA 9.8.1) */
	constexpr size_t kAv = prm::wqe_datagram::size;
	if (len < kCtrl + kAv)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const uint8_t *av = w + kCtrl;
	WriteSource src;
	if (uint8_t s = message_source(kCtrl + kAv, &src); s != kOk)
		return s;
	const uint32_t mtu = 128u << qp.path.mtu; /* prm::qp_mtu: 1 is 256 ... 5 is 4096 */
	if (src.total > mtu)
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	/* The payload, gathered once: one packet, at most 4096 bytes. */
	uint8_t buf[roce::max_datagram];
	const auto plen = static_cast<size_t>(src.total);
	const bool imm = c.opcode == MLX5_OPCODE_SEND_IMM;
	const uint8_t opcode = imm ? roce::opcode::ud_send_only_imm : roce::opcode::ud_send_only;
	uint8_t *payload = buf + roce::header_length(opcode);
	if (src.inl) {
		std::memcpy(payload, src.inl_data, plen);
	} else {
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		if (uint8_t s = validate_list(local, src.segs, src.nseg, Access::local_read);
		    s != kOk)
			return s;
		if (uint8_t s = sge_gather(dma, local, src.segs, src.nseg, 0, payload, plen);
		    s != kOk)
			return s;
	}
	uint32_t q_key = static_cast<uint32_t>(prm::get(av, prm::wqe_datagram::q_key));
	if ((q_key & roce::deth::q_key_use_qp) != 0)
		q_key = qp.path.q_key;
	const auto dqpn = static_cast<uint32_t>(prm::get(av, prm::wqe_datagram::dqpn));
	const uint8_t *rgid = av + prm::wqe_datagram::rgid_byte;
	const bool fl = prm::get(av, prm::wqe_datagram::fl) != 0;
	byte_cnt = static_cast<uint32_t>(plen);
	const uint32_t psn = qp.ud_psn;
	qp.ud_psn = (qp.ud_psn + 1) & kPsnMask;
	dp.ctr_.ud_sent.fetch_add(1, std::memory_order_relaxed);

	roce::Headers h;
	h.opcode = opcode;
	h.se = (c.fm_ce_se & MLX5_WQE_CTRL_SOLICITED) != 0;
	h.dest_qp = dqpn;
	h.psn = psn;
	/* A GSI QP sends as QP 1: the number its peers answer to, not the device's. */
	const uint32_t src_qpn = qp.attr.gsi ? prm::gsi::qpn : qp.qpn;
	h.deth = {q_key, src_qpn};
	h.imm = c.imm;
	const size_t room = sizeof(buf);
	WirePort *wp = qp.path.port >= 1 && qp.path.port <= dp.wire_.size()
			       ? dp.wire_[qp.path.port - 1].get()
			       : nullptr;
	if (wp != nullptr && !fl) {
		Gid remote;
		std::memcpy(remote.data(), rgid, remote.size());
		size_t out = 0;
		/* A GID of the other address family cannot be reached: lost, as on a link. */
		if (!wp->reaches(remote) || roce::build(wp->tx_path(remote), h, {payload, plen},
							{buf, room}, &out) != roce::Error::ok) {
			dp.wctr_.tx_errors.fetch_add(1, std::memory_order_relaxed);
			return kOk;
		}
		const bool sent = wp->send(remote, buf, out) == 0;
		(sent ? dp.wctr_.tx_packets : dp.wctr_.tx_errors)
			.fetch_add(1, std::memory_order_relaxed);
		return kOk;
	}
	/* The loopback: the two ports are joined, so the QP the segment names receives it on
	 * whichever port it is, and QP 1 is the GSI QP of the port across. Source GID: the
	 * sending port's entry 0 (zero on a loopback port, whose GID table is empty). */
	const uint32_t across = dp.cfg_.ports > 1 ? 3 - qp.path.port : qp.path.port;
	Qp *r = dp.find_ud_qp(dqpn, across);
	if (r == nullptr || !r->attr.ud) {
		dp.ctr_.ud_dropped.fetch_add(1, std::memory_order_relaxed);
		return kOk;
	}
	Gid sgid{};
	if (wp != nullptr)
		sgid = wp->gid();
	UdDatagram d;
	d.q_key = q_key;
	d.src_qpn = src_qpn;
	d.has_imm = imm;
	d.imm = c.imm;
	d.payload = {payload, plen};
	const size_t dlen =
		roce::header_length(opcode) + plen + roce::pad_count(plen) + roce::icrc_size;
	d.l3_hdr_type = make_grh(loopback_path(sgid.data(), rgid), dlen, d.grh);
	dp.ud_receive(dma, *r, qp.held, d);
	return kOk;
}

/* A UD packet from the wire, parsed and ICRC-checked. */
void EmuDataPath::ud_packet(const DmaSection &dma, const WirePort &, uint32_t port,
			    const roce::Parsed &pk, const roce::IpPath &from, size_t datagram_len)
{
	const auto dqp = static_cast<uint32_t>(prm::get(pk.bth, roce::bth::dest_qp));
	Qp *qp = find_ud_qp(dqp, port);
	if (qp == nullptr || !qp->attr.ud || qp->path.port != port ||
	    prm::get(pk.bth, roce::bth::p_key) != roce::default_p_key) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	UdDatagram d;
	d.q_key = static_cast<uint32_t>(prm::get(pk.deth, roce::deth::q_key));
	d.src_qpn = static_cast<uint32_t>(prm::get(pk.deth, roce::deth::src_qp));
	d.has_imm = pk.immdt != nullptr;
	if (d.has_imm)
		d.imm = static_cast<uint32_t>(prm::get(pk.immdt, roce::immdt::imm));
	d.payload = pk.payload;
	d.l3_hdr_type = make_grh(from, datagram_len, d.grh);
	std::lock_guard ql(qp->lock);
	ud_receive(dma, *qp, qp->held, d);
}

void EmuDataPath::ud_receive(const DmaSection &dma, Qp &r, std::vector<const void *> &held,
			     const UdDatagram &d)
{
	const QpState st = r.get_state();
	if ((st != QpState::rtr && st != QpState::rts) || !r.attr.rq) {
		ctr_.ud_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	/* IBTA 10.2.5, C10-15: a Q_Key other than the QP's is dropped silently. */
	if (d.q_key != r.path.q_key) {
		ctr_.ud_qkey_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	std::lock_guard rl(r.rq_lock);
	RecvWqe rw;
	switch (rq_take(dma, r, &rw)) {
	case RqTake::empty:
		/* No RNR in UD (IBTA 9.7.5.2.8 is RC's): the datagram is lost. */
		ctr_.ud_no_recv.fetch_add(1, std::memory_order_relaxed);
		return;
	case RqTake::fault:
		r.set_state(QpState::err);
		rq_flush(dma, r);
		return;
	case RqTake::ok:
		break;
	}
	const uint64_t total = kGrh + d.payload.size();
	/* The receive WQE must hold the GRH and the payload: a local length error on the receiver
	 * (rxe_resp.c check_length / RESPST_ERR_LENGTH, class D for UD); the sender never hears
	 * of it. */
	if (total > rw.capacity) {
		rq_fail(dma, r, rw.index, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
		return;
	}
	uint8_t s = kOk;
	{
		MkeyTable::Hold keys(mkeys_, held);
		Translator t(keys, dma, r.attr.pd, r.qpn);
		s = sge_scatter(dma, t, rw.segs, rw.nseg, 0, d.grh, kGrh);
		if (s == kOk && !d.payload.empty())
			s = sge_scatter(dma, t, rw.segs, rw.nseg, kGrh, d.payload.data(),
					d.payload.size());
	}
	if (s != kOk) {
		rq_fail(dma, r, rw.index, s);
		return;
	}
	ctr_.ud_received.fetch_add(1, std::memory_order_relaxed);
	if (r.rcq == nullptr)
		return;
	CqeFields f;
	f.qpn = r.qpn;
	f.wqe_counter = rw.index;
	f.opcode = d.has_imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND;
	f.byte_cnt = static_cast<uint32_t>(total);
	f.imm = d.imm;
	f.src_qpn = d.src_qpn;
	f.grh = prm::cqe::grh_present;
	f.l3_hdr_type = d.l3_hdr_type;
	write_cqe(dma, *r.rcq, f);
}

} // namespace nicmr::emu
