"""Image files to pixels: decoding, resizing on load, and the images that failed to decode.

Modules, in the order data flows through them:

    decode    JPEGs by simplejpeg where it gives OpenCV's pixels, the rest by OpenCV; EXIF orientation
    bands     any number of channels: grayscale, multi-page TIFF bands, 16 bits; band counts from headers
    load      decode and resize to the long side (YOLOv5's `load_image`); `ImageSource`
    failures  images that failed to decode, remembered until the file changes
"""
from .decode import ImageDecodeError, ImageReadError, exif_orientation, imread_bgr, read_whole
from .bands import ImageBands, ImageBandsError, image_bands, imread_bands
from .load import ImageSource, LoadedImage, load_image, reduction, resize_bands, resize_long_side

__all__ = ["ImageDecodeError", "ImageReadError", "exif_orientation", "imread_bgr", "read_whole", "ImageBands",
           "ImageBandsError", "image_bands", "imread_bands", "ImageSource", "LoadedImage", "load_image", "reduction",
           "resize_bands", "resize_long_side"]
