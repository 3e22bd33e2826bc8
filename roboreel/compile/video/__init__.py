"""Clip bytes: HEVC encode under the PSNR floor (GOP by GOP) or a proven stream copy, depth cameras, image
features as clips, resizing and colour tags."""

from roboreel.compile.video._clipproof import check_clip_timing, decode_clip
from roboreel.compile.video._copypolicy import REMUX_CODECS, leading_frame
from roboreel.compile.video._depth import transcode_depth
from roboreel.compile.video._floorcheck import ColourNotCarried, InFlightCheck, psnr
from roboreel.compile.video._imageclips import (
    RGB8_CLIP_FORMATS,
    clip_keys,
    encode_image_clip,
    image_clip_keys,
    kept_images,
)
from roboreel.compile.video._resize import DEPTH_FILTER, FILTER, SWS_FILTERS, resize_frame, transform_record
from roboreel.compile.video._segments import SegmentsUnavailable, encode_segmented, parameter_sets
from roboreel.compile.video._sws import ColourTags
from roboreel.compile.video._target import EncodeTarget
from roboreel.compile.video._transcode import Clip, encode_clip, encoder_input, transcode_span

__all__ = ["Clip", "ColourNotCarried", "ColourTags", "DEPTH_FILTER", "EncodeTarget", "FILTER", "InFlightCheck", "REMUX_CODECS",
           "RGB8_CLIP_FORMATS", "SWS_FILTERS", "SegmentsUnavailable", "check_clip_timing", "clip_keys", "decode_clip",
           "encode_clip", "encode_image_clip", "encode_segmented", "encoder_input", "image_clip_keys", "kept_images",
           "leading_frame", "parameter_sets", "psnr", "resize_frame", "transcode_depth", "transcode_span",
           "transform_record"]
